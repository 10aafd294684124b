package readahead

import (
	"context"
	"sync"
	"sync/atomic"

	"ferry/bucket"
)

// connLimiter bounds concurrent ranged reads of a Fetcher. A freed slot
// goes to a waiting demand read first, then to readahead a demand read is
// waiting for (urgent), then to other readahead in FIFO order.
type connLimiter struct {
	max int

	mu      sync.Mutex
	used    int           // GUARDED_BY(mu)
	demand  []*connWaiter // GUARDED_BY(mu)
	spec    []*connWaiter // GUARDED_BY(mu)
	granted int64         // total grants, for tests; GUARDED_BY(mu)
}

type connWaiter struct {
	ready   chan struct{}
	urgent  *atomic.Bool
	granted bool // GUARDED_BY(connLimiter.mu)
}

func newConnLimiter(max int) *connLimiter { return &connLimiter{max: max} }

func (c *connLimiter) acquire(ctx context.Context, demand bool, urgent *atomic.Bool) error {
	c.mu.Lock()
	if c.used < c.max && len(c.demand) == 0 && (demand || len(c.spec) == 0) {
		c.used++
		c.granted++
		c.mu.Unlock()
		return nil
	}
	w := &connWaiter{ready: make(chan struct{}), urgent: urgent}
	if demand {
		c.demand = append(c.demand, w)
	} else {
		c.spec = append(c.spec, w)
	}
	c.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		if w.granted {
			c.mu.Unlock()
			c.release()
		} else {
			c.demand = remove(c.demand, w)
			c.spec = remove(c.spec, w)
			c.mu.Unlock()
		}
		return bucket.ContextError(ctx, ctx.Err())
	}
}

func (c *connLimiter) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var w *connWaiter
	switch {
	case len(c.demand) > 0:
		w = c.demand[0]
		c.demand = c.demand[1:]
	case len(c.spec) > 0:
		i := 0
		for j, s := range c.spec {
			if s.urgent != nil && s.urgent.Load() {
				i = j
				break
			}
		}
		w = c.spec[i]
		c.spec = append(c.spec[:i:i], c.spec[i+1:]...)
	}
	if w == nil {
		c.used--
		return
	}
	// The slot passes to w; used stays the same.
	w.granted = true
	c.granted++
	close(w.ready)
}

func remove(ws []*connWaiter, w *connWaiter) []*connWaiter {
	for i, x := range ws {
		if x == w {
			return append(ws[:i:i], ws[i+1:]...)
		}
	}
	return ws
}
