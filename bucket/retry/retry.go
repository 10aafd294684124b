// Package retry is a bucket.Bucket decorator that retries transient store
// failures (bucket.IsRetryable: ErrUnavailable and not a cancellation) with
// exponential backoff and full jitter, bounded by an elapsed-time budget
// (and, if asked for, an attempt count). A range reader whose body fails
// mid-way is resumed transparently at the byte it reached, pinned to the
// same version. With Config.Breaker, an operation that spends its whole
// budget trips a circuit breaker (breaker.go): until a background probe
// finds the store back, every operation fails at once.
//
// It must never retry a non-transient error (not found, precondition,
// permission, invalid, cancelled), never wait past the caller's context, and
// never splice bytes of two object versions into one read: an unpinned read
// (empty Version) is only resumed before its first byte.
package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"ferry/bucket"
)

// Defaults for zero Config fields.
const (
	DefaultMaxElapsed = 60 * time.Second
	DefaultBaseDelay  = 100 * time.Millisecond
	DefaultMaxDelay   = 5 * time.Second
)

// Op names passed to Config.OnRetry and logged.
const (
	OpStat = "stat"
	OpList = "list"
	OpRead = "read"
)

// Config tunes the decorator. Zero fields take the defaults above.
type Config struct {
	// MaxAttempts bounds the calls made to the inner bucket for one
	// operation, the first included (1 = never retry); 0 sets no bound
	// but MaxElapsed's, so that a store that is back within MaxElapsed is
	// always reached (an attempt cap would end a 30 s budget after about
	// 2 s of backoff). For a range reader the opening and every resume
	// share one budget.
	MaxAttempts int
	// MaxElapsed bounds the time from the start of an operation (for a
	// resumed reader: from the moment its body failed) to the last retry. A Retry-After hint that would end beyond it
	// makes the decorator give up at once instead of waiting.
	MaxElapsed time.Duration
	// BaseDelay is the backoff ceiling before the first retry; it doubles
	// per retry up to MaxDelay. The actual wait is uniform in [0, ceiling]
	// ("full jitter"), so many clients failing together spread out.
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// SlowWindow and SlowBytes: a body that delivers fewer than SlowBytes
	// (default 64 KiB) in SlowWindow of waiting in Read is abandoned and
	// resumed as if it had been reset. Silence timeouts do not catch a
	// store that trickles a byte now and then. Time the caller spends
	// between Reads does not count. Zero SlowWindow turns this off.
	SlowWindow time.Duration
	SlowBytes  int64
	// Logger receives one debug line per retry; nil logs nothing.
	Logger *slog.Logger
	// OnRetry, if set, is called before each retry wait with the op
	// (OpStat, OpList, OpRead) and the error being retried; package
	// connect uses it to count retries in package metrics.
	OnRetry func(op string, err error)
	// Breaker turns the circuit breaker on: once an operation has spent
	// its whole budget on transient failures, every operation fails at
	// once until a probe (a one-result List, every ProbeInterval, default
	// DefaultProbeInterval) finds the store answering again.
	Breaker       bool
	ProbeInterval time.Duration

	// Test hooks; nil means the real thing.
	//
	// Sleep waits d or until ctx is done, returning ctx's error then.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now reads the clock that MaxElapsed is measured on.
	Now func() time.Time
	// Jitter returns a duration uniform in [0, max].
	Jitter func(max time.Duration) time.Duration
}

func (c Config) withDefaults() Config {
	if c.MaxElapsed <= 0 {
		c.MaxElapsed = DefaultMaxElapsed
	}
	if c.BaseDelay <= 0 {
		c.BaseDelay = DefaultBaseDelay
	}
	if c.SlowBytes <= 0 {
		c.SlowBytes = 64 << 10
	}
	if c.MaxDelay <= 0 {
		c.MaxDelay = DefaultMaxDelay
	}
	if c.MaxDelay < c.BaseDelay {
		c.MaxDelay = c.BaseDelay
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Sleep == nil {
		c.Sleep = sleep
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Jitter == nil {
		c.Jitter = func(max time.Duration) time.Duration {
			return time.Duration(rand.Int64N(int64(max) + 1))
		}
	}
	return c
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Bucket retries the transient failures of the bucket it wraps.
type Bucket struct {
	// Dependencies
	inner bucket.Bucket

	// Constant data
	cfg Config

	// Mutable state with its own synchronisation
	brk *breaker
}

var _ bucket.Bucket = (*Bucket)(nil)

// New wraps b. Safe for concurrent use if b is. Close stops the breaker's
// probe.
func New(b bucket.Bucket, cfg Config) *Bucket {
	r := &Bucket{inner: b, cfg: cfg.withDefaults()}
	r.brk = newBreaker(r.cfg, func(ctx context.Context) error {
		_, err := b.List(ctx, &bucket.ListRequest{Delimiter: "/", MaxResults: 1})
		return err
	})
	return r
}

// Down reports whether the breaker is tripped: the store is known down.
func (b *Bucket) Down() bool { return b.brk.isDown() }

// Trips counts how often the breaker tripped.
func (b *Bucket) Trips() uint64 { return b.brk.trips.Load() }

// Close stops the breaker's probe, if one runs, and waits for it.
func (b *Bucket) Close() { b.brk.close() }

// Name is the inner bucket's name: retrying is invisible in cache keys.
func (b *Bucket) Name() string { return b.inner.Name() }

// Stat retries the inner Stat.
func (b *Bucket) Stat(ctx context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
	var obj *bucket.Object
	bud := b.newBudget()
	err := b.do(ctx, OpStat, req.Name, bud, func() error {
		var err error
		obj, err = b.inner.Stat(ctx, req)
		return err
	})
	return obj, err
}

// List retries the inner List (one page; a page is idempotent given its
// continuation token).
func (b *Bucket) List(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	var l *bucket.Listing
	bud := b.newBudget()
	err := b.do(ctx, OpList, req.Prefix, bud, func() error {
		var err error
		l, err = b.inner.List(ctx, req)
		return err
	})
	return l, err
}

// NewRangeReader retries the open, and returns a reader that resumes a body
// failing with a retryable error at the offset reached, within the same
// attempt budget. The reader, like any io.Reader, is for one goroutine.
func (b *Bucket) NewRangeReader(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	r := &reader{
		b:   b,
		ctx: ctx,
		req: *req,
		off: req.Range.Start,
		bud: b.newBudget(),
	}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

// budget is what one operation has left to spend on retries.
type budget struct {
	// attempts made so far (calls to the inner bucket).
	attempts int
	// outageStart is when the current run of failures began: the start of
	// the operation, or for a resumed reader the moment its body failed.
	// MaxElapsed is measured from it, so a long healthy stream does not use
	// up the time budget of a later outage.
	outageStart time.Time
	// last is the failure retried last (a reader's body failure too), to
	// name when a later attempt is cut off by the caller's deadline.
	last error
}

func (b *Bucket) newBudget() *budget {
	return &budget{outageStart: b.cfg.Now()}
}

// do calls fn until it succeeds, fails with an error not worth retrying, or
// the budget runs out, and returns its last error.
func (b *Bucket) do(ctx context.Context, op, name string, bud *budget, fn func() error) error {
	for {
		if err := b.brk.check(op, name); err != nil {
			return err
		}
		bud.attempts++
		err := bucket.ContextError(ctx, fn())
		if err == nil {
			return nil
		}
		if bud.last != nil && errors.Is(err, bucket.ErrCanceled) {
			// The caller's deadline ended an attempt in flight: its error
			// says only that, while the failure retried before it says
			// why the store did not answer (connection refused, 503, ...).
			// %v: for errors.Is this stays a cancellation, nothing else.
			err = fmt.Errorf("%w (the attempt before it: %v)", err, bud.last)
		}
		if err := b.wait(ctx, op, name, bud, err); err != nil {
			return err
		}
	}
}

// wait decides whether failure err is retried. It returns nil after
// sleeping the backoff if so, and otherwise the error to give the caller.
func (b *Bucket) wait(ctx context.Context, op, name string, bud *budget, err error) error {
	if !bucket.IsRetryable(err) {
		return err
	}
	elapsed := b.cfg.Now().Sub(bud.outageStart)
	if b.cfg.MaxAttempts > 0 && bud.attempts >= b.cfg.MaxAttempts {
		err = fmt.Errorf("%s %q: giving up after %d attempts in %v: %w", op, name, bud.attempts, elapsed.Round(time.Millisecond), err)
		b.brk.trip(err)
		return err
	}
	remaining := b.cfg.MaxElapsed - elapsed
	delay := b.cfg.Jitter(b.ceiling(bud.attempts))
	hint, hasHint := bucket.RetryAfter(err)
	if hasHint && hint > delay {
		delay = hint
	}
	if remaining <= 0 || (hasHint && hint > remaining) {
		err = fmt.Errorf("%s %q: giving up after %d attempts in %v (retry budget %v): %w", op, name, bud.attempts, elapsed.Round(time.Millisecond), b.cfg.MaxElapsed, err)
		b.brk.trip(err)
		return err
	}
	if delay > remaining {
		delay = remaining
	}
	b.cfg.Logger.Debug("retrying store request", "bucket", b.inner.Name(), "op", op, "name", name,
		"attempt", bud.attempts, "delay", delay, "err", err)
	if b.cfg.OnRetry != nil {
		b.cfg.OnRetry(op, err)
	}
	if serr := b.cfg.Sleep(ctx, delay); serr != nil {
		return fmt.Errorf("%w: %s %q: %w while waiting to retry: %w", bucket.ErrCanceled, op, name, serr, err)
	}
	bud.last = err
	return nil
}

// ceiling is the full-jitter backoff ceiling after the given number of
// failed attempts: BaseDelay * 2^(failures-1), capped at MaxDelay.
func (b *Bucket) ceiling(failures int) time.Duration {
	d := b.cfg.BaseDelay
	for i := 1; i < failures && d < b.cfg.MaxDelay; i++ {
		d *= 2
	}
	return min(d, b.cfg.MaxDelay)
}

// reader resumes a range read whose body fails with a retryable error.
type reader struct {
	// Dependencies
	b   *Bucket
	ctx context.Context

	// Constant data
	req bucket.ReadRequest // Range.Start is the original start

	// Mutable state, used by one goroutine at a time (io.Reader contract).
	bud *budget
	// rc is the current body, nil after a failure until reopened; cancel
	// ends its request.
	rc     io.ReadCloser
	cancel context.CancelFunc
	// The slow-body watchdog of the current body (nil when off): it runs
	// only inside Read; waited and got are the time spent and the bytes
	// received since the body last delivered SlowBytes.
	watchdog *time.Timer
	slow     *atomic.Bool // set by the watchdog before it cancels
	waited   time.Duration
	got      int64
	// off is the absolute offset of the next byte to return.
	// INVARIANT: req.Range.Start <= off
	off uint64
	// failed and failOff: whether a body has failed, and r.off then.
	failed  bool
	failOff uint64
	// pending is the retryable body failure to recover from on the next
	// Read, set when that failure came with bytes that were returned first.
	pending error
	// done is the error every later Read returns (io.EOF, a final error,
	// or errClosed).
	done error
}

var errClosed = fmt.Errorf("%w: read after close", bucket.ErrInvalid)

// minProgress is how many bytes a resumed body must deliver before its
// failure counts as a new outage rather than more of the same one.
const minProgress = 256 << 10

func (r *reader) open() error {
	req := r.req
	req.Range.Start = r.off
	return r.b.do(r.ctx, OpRead, r.req.Name, r.bud, func() error {
		ctx, cancel := context.WithCancel(r.ctx)
		rc, err := r.b.inner.NewRangeReader(ctx, &req)
		if err != nil {
			cancel()
			return err
		}
		r.rc, r.cancel = rc, cancel
		r.waited, r.got = 0, 0
		if r.b.cfg.SlowWindow > 0 {
			slow := new(atomic.Bool)
			r.slow = slow
			r.watchdog = time.AfterFunc(time.Hour, func() {
				slow.Store(true)
				cancel()
			})
			r.watchdog.Stop()
		}
		return nil
	})
}

// drop closes the current body and ends its request.
func (r *reader) drop() error {
	if r.watchdog != nil {
		r.watchdog.Stop()
		r.watchdog = nil
	}
	err := r.rc.Close()
	r.cancel()
	r.rc, r.cancel = nil, nil
	return err
}

// readBody reads from the current body under the slow-body watchdog. A
// body the watchdog cut off fails with ErrUnavailable (retryable), not
// with the cancellation it caused.
func (r *reader) readBody(p []byte) (int, error) {
	if r.watchdog == nil {
		return r.rc.Read(p)
	}
	r.watchdog.Reset(r.b.cfg.SlowWindow - r.waited)
	start := time.Now()
	n, err := r.rc.Read(p)
	r.watchdog.Stop()
	r.waited += time.Since(start)
	r.got += int64(n)
	if r.got >= r.b.cfg.SlowBytes {
		r.waited, r.got = 0, 0
	}
	// (Cut off just after a Read that succeeded, the next one fails.)
	if err != nil && err != io.EOF && r.slow.Load() && r.ctx.Err() == nil {
		err = fmt.Errorf("%w: read %q: fewer than %d bytes from the store in %v", bucket.ErrUnavailable,
			r.req.Name, r.b.cfg.SlowBytes, r.b.cfg.SlowWindow)
	}
	return n, err
}

// resumable reports whether a body failure can be recovered by reopening.
// Without a pinned version a reopen might read another version, so only a
// read that has returned nothing yet may be reopened.
func (r *reader) resumable() bool {
	return r.req.Version != "" || r.off == r.req.Range.Start
}

// resume waits and reopens after body failure err.
func (r *reader) resume(err error) error {
	if err := r.b.wait(r.ctx, OpRead, r.req.Name, r.bud, err); err != nil {
		return err
	}
	return r.open()
}

func (r *reader) Read(p []byte) (int, error) {
	if r.done != nil {
		return 0, r.done
	}
	if r.pending != nil {
		err := r.pending
		r.pending = nil
		if err := r.resume(err); err != nil {
			r.done = err
			return 0, err
		}
	}
	for {
		n, err := r.readBody(p)
		r.off += uint64(n)
		if err == nil {
			return n, nil
		}
		if err == io.EOF {
			r.done = io.EOF
			return n, io.EOF
		}
		err = bucket.ContextError(r.ctx, err)
		if !bucket.IsRetryable(err) || !r.resumable() {
			r.done = err
			return n, err
		}
		// The body is broken: drop it and resume at r.off. Its Close error
		// says nothing new.
		_ = r.drop()
		// A body that delivered real progress since the last failure
		// starts a new outage, with a full budget: a long healthy transfer
		// may fail more than once. One that did not (it fails at once, or
		// trickles) stays in the outage it is in, so the budget bounds it.
		if !r.failed || r.off-r.failOff >= minProgress {
			r.bud.outageStart = r.b.cfg.Now()
		}
		r.failed, r.failOff = true, r.off
		if n > 0 {
			// Hand over the bytes we have; recover on the next call.
			r.pending = err
			return n, nil
		}
		if err := r.resume(err); err != nil {
			r.done = err
			return 0, err
		}
	}
}

func (r *reader) Close() error {
	if r.done == errClosed {
		return nil
	}
	r.done = errClosed
	r.pending = nil
	if r.rc == nil {
		return nil
	}
	return r.drop()
}
