package mlperf

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock moves only when someone sleeps.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

func (c *fakeClock) advance(d time.Duration) { _ = c.Sleep(context.Background(), d) }

func TestMeterExcludesFirstStep(t *testing.T) {
	c := &fakeClock{}
	m := NewMeter(c)
	// Step 1: waits 5 s for data (cold start), computes 1 s. Not counted.
	w := c.Now()
	c.advance(5 * time.Second)
	c.advance(time.Second)
	m.StepDone(w, 100, time.Second)
	// Steps 2 and 3: wait 1 s each, compute 1 s each: AU = 2/4.
	for range 2 {
		w = c.Now()
		c.advance(time.Second)
		c.advance(time.Second)
		m.StepDone(w, 10, time.Second)
	}
	assert.Equal(t, 2, m.Measured())
	assert.InDelta(t, 0.5, m.AU(), 1e-9)
	assert.EqualValues(t, 20, m.bytes)
}

func TestMeterNoWaitIsFullUtilisation(t *testing.T) {
	c := &fakeClock{}
	m := NewMeter(c)
	for range 10 {
		w := c.Now()
		c.advance(224 * time.Millisecond)
		m.StepDone(w, 1, 224*time.Millisecond)
	}
	assert.InDelta(t, 1.0, m.AU(), 1e-9)
}

func TestMeterTooFewSteps(t *testing.T) {
	m := NewMeter(&fakeClock{})
	assert.Zero(t, m.AU())
	m.StepDone(time.Time{}, 1, time.Second)
	assert.Zero(t, m.AU())
}

func TestSamplesPacksRecords(t *testing.T) {
	w := Workload{SampleSize: 100, SamplesPerFile: 3}
	s := Samples(w, []string{"a", "b"})
	require.Len(t, s, 6)
	assert.Equal(t, Sample{File: "a", Offset: 0, Size: 100}, s[0])
	assert.Equal(t, Sample{File: "a", Offset: 200, Size: 100}, s[2])
	assert.Equal(t, Sample{File: "b", Offset: 0, Size: 100}, s[3])
}

func files(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("f%03d", i)
	}
	return out
}

func TestRunInstantStorageIsFullUtilisation(t *testing.T) {
	w := Workload{Name: "t", SampleSize: 10, SamplesPerFile: 1, BatchSize: 4, Compute: 100 * time.Millisecond, PassAU: 0.9}
	res, err := Run(context.Background(), Config{
		Workload: w, Accelerators: 1, ReadersPerAccelerator: 2, Files: files(40),
		Read:  func(ctx context.Context, s Sample) (int64, error) { return s.Size, nil },
		Clock: &fakeClock{},
	})
	require.NoError(t, err)
	assert.Equal(t, 9, res.Steps) // 40 samples / 4 per step, first excluded
	assert.InDelta(t, 1.0, res.AU, 1e-9)
	assert.True(t, res.Pass)
	assert.EqualValues(t, 400, res.Bytes)
	// 36 measured samples of 10 bytes over 9 steps of 0.1 s.
	assert.InDelta(t, 360/0.9, res.BytesPerSecond, 1e-6)
}

func TestRunSlowStorageLowersUtilisation(t *testing.T) {
	// One reader, one accelerator, one shared fake clock: each sample
	// costs 50 ms of reading and each step of 4 samples 100 ms of compute,
	// and the fake clock cannot overlap them, so AU = 100/(100+200).
	c := &fakeClock{}
	w := Workload{Name: "t", SampleSize: 1, SamplesPerFile: 1, BatchSize: 4, Compute: 100 * time.Millisecond, PassAU: 0.9}
	var mu sync.Mutex
	res, err := Run(context.Background(), Config{
		Workload: w, Accelerators: 1, ReadersPerAccelerator: 1, PrefetchBatches: 1, Files: files(8 * 4),
		Read: func(ctx context.Context, s Sample) (int64, error) {
			mu.Lock()
			defer mu.Unlock()
			return 1, c.Sleep(ctx, 50*time.Millisecond)
		},
		Clock: c,
	})
	require.NoError(t, err)
	assert.Less(t, res.AU, 0.9)
	assert.False(t, res.Pass)
}

func TestRunSharesFilesDisjointly(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	w := Workload{Name: "t", SampleSize: 5, SamplesPerFile: 2, BatchSize: 2, Compute: time.Millisecond}
	res, err := Run(context.Background(), Config{
		Workload: w, Accelerators: 3, ReadersPerAccelerator: 2, Files: files(12), Seed: 7,
		Read: func(ctx context.Context, s Sample) (int64, error) {
			mu.Lock()
			seen[fmt.Sprintf("%s@%d", s.File, s.Offset)]++
			mu.Unlock()
			return s.Size, nil
		},
		Clock: &fakeClock{},
	})
	require.NoError(t, err)
	assert.Len(t, seen, 24, "every record of every file read")
	for k, n := range seen {
		assert.Equal(t, 1, n, "%s read more than once in one pass", k)
	}
	assert.EqualValues(t, 24*5, res.Bytes)
}

func TestRunReadErrorStopsTraining(t *testing.T) {
	boom := errors.New("boom")
	w := Workload{Name: "t", SampleSize: 1, SamplesPerFile: 1, BatchSize: 2, Compute: time.Millisecond}
	_, err := Run(context.Background(), Config{
		Workload: w, Accelerators: 2, ReadersPerAccelerator: 2, Files: files(20),
		Read: func(ctx context.Context, s Sample) (int64, error) {
			if s.File == "f007" {
				return 0, boom
			}
			return 1, nil
		},
		Clock: &fakeClock{},
	})
	require.ErrorIs(t, err, boom)
}

func TestRunRejectsTooLittleData(t *testing.T) {
	_, err := Run(context.Background(), Config{Workload: UNet3D, Accelerators: 4, ReadersPerAccelerator: 1, Files: files(2),
		Read: func(ctx context.Context, s Sample) (int64, error) { return 0, nil }})
	require.Error(t, err)
}
