// Package mlperf emulates MLPerf Storage training the way DLIO does, scaled
// to one machine: A emulated accelerators, each fed by R reader goroutines
// through a bounded prefetch queue, take a batch of samples and "compute"
// by sleeping the time an H100 takes per step. The score is accelerator
// utilisation (AU): compute time over wall time, first step excluded.
//
// It measures storage, so it must never do anything between a sample's
// read and its delivery but count it: no decoding, no copies kept.
package mlperf

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Workload is one MLPerf Storage v2.0 training model.
type Workload struct {
	Name string
	// SampleSize in bytes; for packed workloads the record size.
	SampleSize int64
	// SamplesPerFile: 1 for one sample per file (read whole), more for
	// record files streamed sequentially.
	SamplesPerFile int
	// BatchSize samples per step per accelerator.
	BatchSize int
	// Compute is the emulated H100 time for one step.
	Compute time.Duration
	// PassAU is the MLPerf pass line.
	PassAU float64
}

// The three v2.0 training workloads, with the sample sizes and H100
// compute times of the MLPerf Storage rules.
var (
	UNet3D    = Workload{Name: "unet3d", SampleSize: 140 << 20, SamplesPerFile: 1, BatchSize: 7, Compute: 323 * time.Millisecond, PassAU: 0.90}
	ResNet50  = Workload{Name: "resnet50", SampleSize: 115 << 10, SamplesPerFile: 1251, BatchSize: 400, Compute: 224 * time.Millisecond, PassAU: 0.90}
	CosmoFlow = Workload{Name: "cosmoflow", SampleSize: 2764 << 10, SamplesPerFile: 1, BatchSize: 1, Compute: 3500 * time.Microsecond, PassAU: 0.70}
)

// Workloads lists them by name.
var Workloads = map[string]Workload{UNet3D.Name: UNet3D, ResNet50.Name: ResNet50, CosmoFlow.Name: CosmoFlow}

// Clock is time as the emulation sees it; tests use a fake.
type Clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the wall clock.
type RealClock struct{}

func (RealClock) Now() time.Time { return time.Now() }
func (RealClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sample names one unit of training data: a whole file, or one record of
// a packed file.
type Sample struct {
	File   string
	Offset int64
	Size   int64
}

// ReadFunc reads one sample and returns how many bytes it delivered.
type ReadFunc func(ctx context.Context, s Sample) (int64, error)

// Config is one training run.
type Config struct {
	Workload     Workload
	Accelerators int
	// ReadersPerAccelerator (DLIO's read_threads).
	ReadersPerAccelerator int
	// PrefetchBatches is the queue depth per accelerator, in batches.
	PrefetchBatches int
	// Steps per accelerator; 0 means one pass over its share of Files.
	Steps int
	// Files of the dataset; each accelerator takes a disjoint share.
	Files []string
	Seed  uint64
	Read  ReadFunc
	Clock Clock
}

// Result is the score of a run.
type Result struct {
	Workload     string
	Accelerators int
	Steps        int // measured steps per accelerator (first excluded)
	// AU is the mean accelerator utilisation over accelerators.
	AU float64
	// ComputeTime and WallTime summed over accelerators (measured steps).
	ComputeTime time.Duration
	WallTime    time.Duration
	// Bytes delivered over the whole run, and the rate of the measured
	// steps from the first measured step's start to the last one's end.
	Bytes          int64
	BytesPerSecond float64
	Pass           bool
}

// Meter keeps one accelerator's books. The first step is excluded because
// it includes start-up (empty queues, cold connections), as DLIO does.
type Meter struct {
	clock   Clock
	steps   int
	compute time.Duration
	bytes   int64     // delivered in measured steps
	start   time.Time // when the second step began waiting for data
	end     time.Time
}

// NewMeter starts the books for one accelerator.
func NewMeter(c Clock) *Meter { return &Meter{clock: c} }

// StepDone records a finished step that began waiting for its batch at
// waitStart, delivered bytes and computed for compute.
func (m *Meter) StepDone(waitStart time.Time, bytes int64, compute time.Duration) {
	m.steps++
	if m.steps == 1 {
		return
	}
	if m.steps == 2 {
		m.start = waitStart
	}
	m.bytes += bytes
	m.compute += compute
	m.end = m.clock.Now()
}

// Measured is the number of steps that count.
func (m *Meter) Measured() int { return max(m.steps-1, 0) }

// AU is compute time over wall time for the measured steps.
func (m *Meter) AU() float64 {
	wall := m.end.Sub(m.start)
	if m.Measured() == 0 || wall <= 0 {
		return 0
	}
	return float64(m.compute) / float64(wall)
}

// Samples expands files into samples for workload w: one per file, or
// SamplesPerFile records of SampleSize each, in file order.
func Samples(w Workload, files []string) []Sample {
	var out []Sample
	for _, f := range files {
		for i := range max(w.SamplesPerFile, 1) {
			out = append(out, Sample{File: f, Offset: int64(i) * w.SampleSize, Size: w.SampleSize})
		}
	}
	return out
}

// Run trains: every accelerator reads its share of the samples (files
// shuffled, records of a file kept in order, as DLIO streams them) through
// its readers and consumes them in batches.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Accelerators <= 0 || cfg.ReadersPerAccelerator <= 0 || cfg.Workload.BatchSize <= 0 {
		return nil, errors.New("mlperf: accelerators, readers and batch size must be positive")
	}
	if len(cfg.Files) < cfg.Accelerators {
		return nil, fmt.Errorf("mlperf: %d files cannot feed %d accelerators", len(cfg.Files), cfg.Accelerators)
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.PrefetchBatches <= 0 {
		cfg.PrefetchBatches = 2
	}
	files := append([]string(nil), cfg.Files...)
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	rng.Shuffle(len(files), func(i, j int) { files[i], files[j] = files[j], files[i] })

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	meters := make([]*Meter, cfg.Accelerators)
	bytes := make([]int64, cfg.Accelerators)
	errs := make([]error, cfg.Accelerators)
	var wg sync.WaitGroup
	for a := range cfg.Accelerators {
		var share []string
		for i := a; i < len(files); i += cfg.Accelerators {
			share = append(share, files[i])
		}
		meters[a] = NewMeter(cfg.Clock)
		wg.Add(1)
		go func() {
			defer wg.Done()
			bytes[a], errs[a] = accelerator(ctx, cfg, Samples(cfg.Workload, share), meters[a])
			if errs[a] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	res := &Result{Workload: cfg.Workload.Name, Accelerators: cfg.Accelerators, Steps: meters[0].Measured()}
	var first, last time.Time
	for i, m := range meters {
		res.AU += m.AU() / float64(len(meters))
		res.ComputeTime += m.compute
		wall := m.end.Sub(m.start)
		res.WallTime += wall
		res.Bytes += bytes[i]
		if i == 0 || m.start.Before(first) {
			first = m.start
		}
		if m.end.After(last) {
			last = m.end
		}
		res.Steps = min(res.Steps, m.Measured())
	}
	if span := last.Sub(first); span > 0 {
		var measured int64
		for _, m := range meters {
			measured += m.bytes
		}
		res.BytesPerSecond = float64(measured) / span.Seconds()
	}
	res.Pass = res.AU >= cfg.Workload.PassAU
	return res, nil
}

// accelerator runs readers feeding one queue, and the step loop.
func accelerator(ctx context.Context, cfg Config, samples []Sample, m *Meter) (int64, error) {
	w := cfg.Workload
	steps := cfg.Steps
	if steps == 0 {
		steps = len(samples) / w.BatchSize
	}
	if steps < 2 {
		return 0, fmt.Errorf("mlperf: %s needs at least 2 steps of %d samples per accelerator, has %d samples", w.Name, w.BatchSize, len(samples))
	}
	need := steps * w.BatchSize
	// Packed files are streamed: a reader takes a whole file's records in
	// order, so work is handed out per file, not per record.
	type job struct{ recs []Sample }
	var jobs []job
	for i := 0; i < len(samples) && need > 0; {
		j := i + max(w.SamplesPerFile, 1)
		j = min(j, len(samples), i+need)
		jobs = append(jobs, job{samples[i:j]})
		need -= j - i
		i = j
		if i == len(samples) && need > 0 {
			i = 0 // wrap around: more steps than one pass
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := make(chan int64, cfg.PrefetchBatches*w.BatchSize)
	jobc := make(chan job)
	errc := make(chan error, cfg.ReadersPerAccelerator+1)
	go func() {
		defer close(jobc)
		for _, j := range jobs {
			select {
			case jobc <- j:
			case <-ctx.Done():
				return
			}
		}
	}()
	var rw sync.WaitGroup
	for range cfg.ReadersPerAccelerator {
		rw.Add(1)
		go func() {
			defer rw.Done()
			for j := range jobc {
				for _, s := range j.recs {
					n, err := cfg.Read(ctx, s)
					if err != nil {
						errc <- fmt.Errorf("reading %s at %d: %w", s.File, s.Offset, err)
						cancel()
						return
					}
					select {
					case queue <- n:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}
	defer rw.Wait()

	var total int64
	for range steps {
		waitStart := cfg.Clock.Now()
		var batch int64
		for range w.BatchSize {
			select {
			case n := <-queue:
				batch += n
			case err := <-errc:
				return total, err
			case <-ctx.Done():
				return total, cause(errc, ctx.Err())
			}
		}
		total += batch
		if err := cfg.Clock.Sleep(ctx, w.Compute); err != nil {
			return total, cause(errc, err)
		}
		m.StepDone(waitStart, batch, w.Compute)
	}
	cancel()
	return total, nil
}

// cause prefers a reader's error to err: a reader that fails sends its
// error before it cancels, so a cancellation seen here may be its doing.
func cause(errc <-chan error, err error) error {
	select {
	case e := <-errc:
		return e
	default:
		return err
	}
}
