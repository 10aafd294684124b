package retry

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"ferry/bucket"
	"ferry/bucket/buckettest"
	"ferry/bucket/mem"
)

// A store that fails every other request, and resets every other body
// (half-way if the read is pinned), must still pass the whole conformance
// suite through retry. Concurrent subtests share the fault counters, so one
// request may meet several failures in a row: hence the generous budget.
func TestConformanceOverFlakyMem(t *testing.T) {
	var retries atomic.Int64
	onRetry := func(string, error) { retries.Add(1) }
	buckettest.Run(t, func(t *testing.T) (bucket.Bucket, bucket.Writer) {
		m := mem.New("flaky")
		var calls, bodies atomic.Int64
		flaky := func() error {
			if calls.Add(1)%2 == 1 {
				return fmt.Errorf("%w: injected 503", bucket.ErrUnavailable)
			}
			return nil
		}
		m.SetFaults(mem.Faults{
			Stat: func(context.Context, *bucket.StatRequest) error { return flaky() },
			List: func(context.Context, *bucket.ListRequest) error { return flaky() },
			Read: func(context.Context, *bucket.ReadRequest) error { return flaky() },
			ReadBody: func(req *bucket.ReadRequest) (int64, error) {
				if bodies.Add(1)%2 == 1 {
					if req.Version == "" {
						// Unpinned reads are only resumed before the
						// first byte (a reopen might see another version).
						return 0, mem.ErrInjectedReset
					}
					return int64(req.Range.Len() / 2), mem.ErrInjectedReset
				}
				return 0, nil
			},
		})
		noSleep := func(ctx context.Context, _ time.Duration) error { return ctx.Err() }
		return New(m, Config{MaxAttempts: 20, Sleep: noSleep, OnRetry: onRetry}), m
	})
	if retries.Load() == 0 {
		t.Error("the faults never triggered a retry")
	}
	t.Logf("%d retries", retries.Load())
}
