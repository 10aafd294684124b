package retry

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

// outage is a store that refuses every request while down, and counts
// the requests it gets.
type outage struct {
	down     atomic.Bool
	answer   error // what it answers when up (nil: success)
	calls    atomic.Int64
	listings atomic.Int64
}

func (o *outage) Name() string { return "outage://b" }

func (o *outage) result() error {
	o.calls.Add(1)
	if o.down.Load() {
		return fmt.Errorf("%w: connection refused", bucket.ErrUnavailable)
	}
	return o.answer
}

func (o *outage) Stat(ctx context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
	if err := o.result(); err != nil {
		return nil, err
	}
	return &bucket.Object{Name: req.Name}, nil
}

func (o *outage) List(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	o.listings.Add(1)
	if err := o.result(); err != nil {
		return nil, err
	}
	return &bucket.Listing{}, nil
}

func (o *outage) NewRangeReader(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	return nil, o.result()
}

// breakerConfig retries for 50 ms and probes every 5 ms, in real time.
func breakerConfig() Config {
	return Config{Breaker: true, MaxElapsed: 50 * time.Millisecond, BaseDelay: time.Millisecond,
		MaxDelay: 5 * time.Millisecond, ProbeInterval: 5 * time.Millisecond}
}

// The first operation to spend its budget trips the breaker; from then on
// operations fail at once without asking the store, until a probe finds
// it back.
func TestBreakerFailsFastUntilTheStoreIsBack(t *testing.T) {
	store := &outage{}
	store.down.Store(true)
	b := New(store, breakerConfig())
	t.Cleanup(b.Close)
	ctx := context.Background()

	_, err := b.Stat(ctx, &bucket.StatRequest{Name: "a"})
	require.ErrorIs(t, err, bucket.ErrUnavailable)
	assert.Contains(t, err.Error(), "giving up after")
	assert.True(t, b.Down())
	assert.Equal(t, uint64(1), b.Trips())

	// Probes list; nothing else reaches the store.
	stats := store.calls.Load() - store.listings.Load()
	for _, name := range []string{"b", "c", "d"} {
		_, err := b.Stat(ctx, &bucket.StatRequest{Name: name})
		require.ErrorIs(t, err, bucket.ErrUnavailable)
		assert.Contains(t, err.Error(), "has not answered since")
		_, err = b.NewRangeReader(ctx, &bucket.ReadRequest{Name: name, Version: "1"})
		require.ErrorIs(t, err, bucket.ErrUnavailable)
	}
	assert.Equal(t, stats, store.calls.Load()-store.listings.Load(), "operations asked a store known down")
	require.Eventually(t, func() bool { return store.listings.Load() >= 3 }, 10*time.Second, time.Millisecond, "no probe")
	assert.True(t, b.Down(), "the probes failed")

	store.down.Store(false)
	require.Eventually(t, func() bool { return !b.Down() }, 10*time.Second, time.Millisecond, "the probe never saw the store back")
	_, err = b.Stat(ctx, &bucket.StatRequest{Name: "a"})
	require.NoError(t, err)
	assert.Equal(t, uint64(1), b.Trips())
}

// An operation retrying when another one trips the breaker stops at its
// next attempt, rather than spend its own whole budget: an operation that
// waits on several requests answers within about one budget.
func TestBreakerEndsRetriesInFlight(t *testing.T) {
	store := &outage{}
	store.down.Store(true)
	cfg := breakerConfig()
	cfg.MaxElapsed = time.Hour // only the trip below can end the retries
	b := New(store, cfg)
	t.Cleanup(b.Close)
	inFlight := make(chan error, 1)
	go func() {
		_, err := b.Stat(context.Background(), &bucket.StatRequest{Name: "retrying"})
		inFlight <- err
	}()
	require.Eventually(t, func() bool { return store.calls.Load() >= 2 }, 10*time.Second, time.Millisecond)
	b.brk.trip(fmt.Errorf("%w: another operation gave up", bucket.ErrUnavailable))
	select {
	case err := <-inFlight:
		require.ErrorIs(t, err, bucket.ErrUnavailable)
		assert.Contains(t, err.Error(), "another operation gave up")
	case <-time.After(10 * time.Second):
		t.Fatal("a retrying operation went on after the breaker tripped")
	}
}

// Any answer but a transient failure means the store is back: a probe
// that finds nothing, or is refused, still resets the breaker; a store
// that answers "not found" never trips it.
func TestBreakerAnswersAreNotOutages(t *testing.T) {
	store := &outage{answer: fmt.Errorf("%w: no such bucket", bucket.ErrNotFound)}
	b := New(store, breakerConfig())
	t.Cleanup(b.Close)
	_, err := b.Stat(context.Background(), &bucket.StatRequest{Name: "a"})
	require.ErrorIs(t, err, bucket.ErrNotFound)
	assert.False(t, b.Down())

	store.down.Store(true)
	_, err = b.Stat(context.Background(), &bucket.StatRequest{Name: "a"})
	require.ErrorIs(t, err, bucket.ErrUnavailable)
	require.True(t, b.Down())
	store.down.Store(false)
	require.Eventually(t, func() bool { return !b.Down() }, 10*time.Second, time.Millisecond, "a refusal is an answer")
}

// Without Breaker, every operation retries for its own budget; Close
// stops a probe that never succeeds.
func TestBreakerOffAndClose(t *testing.T) {
	store := &outage{}
	store.down.Store(true)
	cfg := breakerConfig()
	cfg.Breaker = false
	off := New(store, cfg)
	for range 2 {
		before := store.calls.Load()
		_, err := off.Stat(context.Background(), &bucket.StatRequest{Name: "a"})
		require.ErrorIs(t, err, bucket.ErrUnavailable)
		assert.Greater(t, store.calls.Load()-before, int64(1), "retried")
	}
	assert.False(t, off.Down())
	off.Close()

	on := New(store, breakerConfig())
	_, err := on.Stat(context.Background(), &bucket.StatRequest{Name: "a"})
	require.ErrorIs(t, err, bucket.ErrUnavailable)
	require.True(t, on.Down())
	on.Close() // returns once the probe has stopped
	probes := store.listings.Load()
	time.Sleep(20 * time.Millisecond)
	assert.Equal(t, probes, store.listings.Load(), "probing after Close")
}
