package retry

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"ferry/bucket"
)

// The circuit breaker. Retrying each request for the whole budget is right
// while a store might answer soon; once one operation has spent its whole
// budget on transient failures, the store is down, and an operation that
// makes several requests (a lookup, a read waiting for readahead, the
// kernel retrying a failed read) would otherwise wait a budget for each.
// So the first operation that gives up trips the breaker: from then on
// every operation, new or retrying, fails at once with ErrUnavailable,
// without asking the store, and one background probe asks it every
// ProbeInterval until it answers (anything but a transient failure, a
// "not found" too). Then the breaker resets and requests go through
// again. Callers keep serving what they have cached meanwhile.

// DefaultProbeInterval is Config.ProbeInterval's default.
const DefaultProbeInterval = time.Second

// breaker is the state a Bucket's operations share about the store.
type breaker struct {
	// Dependencies
	probe func(ctx context.Context) error // one cheap request

	// Constant data
	on       bool
	interval time.Duration
	sleep    func(ctx context.Context, d time.Duration) error
	now      func() time.Time
	ctx      context.Context // ends the probe (Close)
	cancel   context.CancelFunc

	// Mutable state
	trips  atomic.Uint64
	mu     sync.Mutex
	down   bool      // GUARDED_BY(mu)
	since  time.Time // GUARDED_BY(mu); when it tripped
	cause  error     // GUARDED_BY(mu); the failure that tripped it
	probes sync.WaitGroup
}

func newBreaker(cfg Config, probe func(ctx context.Context) error) *breaker {
	ctx, cancel := context.WithCancel(context.Background())
	return &breaker{probe: probe, on: cfg.Breaker, interval: cfg.ProbeInterval,
		sleep: cfg.Sleep, now: cfg.Now, ctx: ctx, cancel: cancel}
}

// check returns the error an operation on name fails with while the
// store is down, or nil.
func (k *breaker) check(op, name string) error {
	if !k.on {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.down {
		return nil
	}
	return fmt.Errorf("%s %q: the store has not answered since %s (checked every %v): %w",
		op, name, k.since.Format(time.RFC3339), k.interval, k.cause)
}

// trip records that an operation gave up on transient failure err, and
// starts the probe if the breaker was not tripped already.
func (k *breaker) trip(err error) {
	if !k.on {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.down || k.ctx.Err() != nil {
		return
	}
	k.down, k.since, k.cause = true, k.now(), err
	k.trips.Add(1)
	k.probes.Add(1)
	go k.probeUntilUp()
}

// probeUntilUp asks the store every interval until it answers, then
// resets the breaker.
func (k *breaker) probeUntilUp() {
	defer k.probes.Done()
	for {
		if k.sleep(k.ctx, k.interval) != nil {
			return // closed
		}
		if err := k.probe(k.ctx); err == nil || !bucket.IsRetryable(err) {
			if k.ctx.Err() != nil {
				return
			}
			k.mu.Lock()
			k.down, k.cause = false, nil
			k.mu.Unlock()
			return
		}
	}
}

// isDown reports whether the breaker is tripped.
func (k *breaker) isDown() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.down
}

// close stops the probe and waits for it.
func (k *breaker) close() {
	k.cancel()
	k.probes.Wait()
}
