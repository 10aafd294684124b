package retry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

// fake is a Bucket that fails in exactly the scripted order: each call of a
// kind consumes the next entry of its fault list (nil = succeed), and each
// successful open consumes the next body fault.
type fake struct {
	mu sync.Mutex
	// objects by name. GUARDED_BY(mu)
	objects map[string]fakeObject
	// Scripts. GUARDED_BY(mu)
	statFaults, listFaults, openFaults []error
	bodyFaults                         []bodyFault
	// afterOpen, if set, runs after each successful open (e.g. to change
	// the object). GUARDED_BY(mu)
	afterOpen func(f *fake)
	// Records. GUARDED_BY(mu)
	statCalls, listCalls int
	opens                []bucket.ReadRequest
	bodiesOpen           int
}

type fakeObject struct {
	data    []byte
	version string
}

// bodyFault makes a body fail with err once `after` bytes were returned.
// withBytes returns the last bytes and the error from the same Read call.
type bodyFault struct {
	after     int
	err       error
	withBytes bool
}

var _ bucket.Bucket = (*fake)(nil)

func newFake() *fake {
	return &fake{objects: map[string]fakeObject{
		"a": {data: []byte("0123456789abcdefghij"), version: "v1"},
	}}
}

func pop[T any](s *[]T) (T, bool) {
	var zero T
	if len(*s) == 0 {
		return zero, false
	}
	v := (*s)[0]
	*s = (*s)[1:]
	return v, true
}

func (f *fake) Name() string { return "fake://b" }

func (f *fake) Stat(ctx context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statCalls++
	if err, _ := pop(&f.statFaults); err != nil {
		return nil, err
	}
	o, ok := f.objects[req.Name]
	if !ok {
		return nil, bucket.ErrNotFound
	}
	return &bucket.Object{Name: req.Name, Size: uint64(len(o.data)), Version: o.version}, nil
}

func (f *fake) List(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listCalls++
	if err, _ := pop(&f.listFaults); err != nil {
		return nil, err
	}
	return &bucket.Listing{Prefixes: []string{req.Prefix + "x/"}}, nil
}

func (f *fake) NewRangeReader(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opens = append(f.opens, *req)
	if err, _ := pop(&f.openFaults); err != nil {
		return nil, err
	}
	o, ok := f.objects[req.Name]
	if !ok {
		return nil, bucket.ErrNotFound
	}
	if req.Version != "" && req.Version != o.version {
		return nil, fmt.Errorf("%q: %w", req.Name, bucket.ErrPrecondition)
	}
	r := req.Range.Clip(uint64(len(o.data)))
	fault, hasFault := pop(&f.bodyFaults)
	f.bodiesOpen++
	if f.afterOpen != nil {
		f.afterOpen(f)
	}
	return &fakeBody{f: f, data: o.data[r.Start:r.Limit], fault: fault, hasFault: hasFault}, nil
}

func (f *fake) snapshot() (stats, lists int, opens []bucket.ReadRequest, bodiesOpen int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statCalls, f.listCalls, append([]bucket.ReadRequest(nil), f.opens...), f.bodiesOpen
}

type fakeBody struct {
	f        *fake
	data     []byte
	sent     int
	fault    bodyFault
	hasFault bool
	closed   bool
}

func (b *fakeBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errors.New("fakeBody: read after close")
	}
	if b.hasFault && b.sent >= b.fault.after {
		return 0, b.fault.err
	}
	if b.sent == len(b.data) {
		return 0, io.EOF
	}
	end := len(b.data)
	if b.hasFault && b.fault.after < end {
		end = b.fault.after
	}
	n := copy(p, b.data[b.sent:end])
	b.sent += n
	if b.hasFault && b.fault.withBytes && b.sent >= b.fault.after {
		return n, b.fault.err
	}
	return n, nil
}

func (b *fakeBody) Close() error {
	if b.closed {
		return errors.New("fakeBody: closed twice")
	}
	b.closed = true
	b.f.mu.Lock()
	b.f.bodiesOpen--
	b.f.mu.Unlock()
	return nil
}

// clock is a fake time source: Sleep advances it instead of waiting.
type clock struct {
	mu     sync.Mutex
	now    time.Time             // GUARDED_BY(mu)
	sleeps []time.Duration       // GUARDED_BY(mu)
	jitter []time.Duration       // ceilings asked for. GUARDED_BY(mu)
	onWait func(d time.Duration) // GUARDED_BY(mu)
}

func newClock() *clock { return &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	hook := c.onWait
	c.mu.Unlock()
	if hook != nil {
		hook(d)
	}
	return ctx.Err()
}

// Jitter returns the ceiling itself so waits are predictable.
func (c *clock) Jitter(max time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.jitter = append(c.jitter, max)
	return max
}

func (c *clock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

func (c *clock) config(cfg Config) Config {
	cfg.Sleep, cfg.Now, cfg.Jitter = c.Sleep, c.Now, c.Jitter
	return cfg
}

var (
	unavailable = fmt.Errorf("%w: 503 from fake", bucket.ErrUnavailable)
	reset       = fmt.Errorf("%w: connection reset by peer", bucket.ErrUnavailable)
	shortBody   = fmt.Errorf("%w: %w", bucket.ErrUnavailable, io.ErrUnexpectedEOF)
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestStatRetriesTransientErrors(t *testing.T) {
	f := newFake()
	f.statFaults = []error{unavailable, reset}
	c := newClock()
	b := New(f, c.config(Config{}))

	obj, err := b.Stat(context.Background(), &bucket.StatRequest{Name: "a"})
	require.NoError(t, err)
	assert.Equal(t, "a", obj.Name)
	stats, _, _, _ := f.snapshot()
	assert.Equal(t, 3, stats)
	assert.Equal(t, []time.Duration{ms(100), ms(200)}, c.Sleeps())
	assert.Equal(t, "fake://b", b.Name())
}

func TestNonRetryableErrorsReturnAtOnce(t *testing.T) {
	for _, want := range []error{
		bucket.ErrNotFound,
		bucket.ErrPrecondition,
		bucket.ErrPermission,
		bucket.ErrInvalid,
		bucket.ErrCanceled,
		errors.Join(bucket.ErrCanceled, bucket.ErrUnavailable), // a cancelled transient failure
		errors.New("unclassified"),
	} {
		t.Run(want.Error(), func(t *testing.T) {
			f := newFake()
			f.statFaults = []error{want}
			f.listFaults = []error{want}
			f.openFaults = []error{want}
			c := newClock()
			b := New(f, c.config(Config{}))
			ctx := context.Background()

			_, err := b.Stat(ctx, &bucket.StatRequest{Name: "a"})
			assert.ErrorIs(t, err, want)
			_, err = b.List(ctx, &bucket.ListRequest{})
			assert.ErrorIs(t, err, want)
			_, err = b.NewRangeReader(ctx, &bucket.ReadRequest{Name: "a", Range: rng(0, 4)})
			assert.ErrorIs(t, err, want)

			stats, lists, opens, _ := f.snapshot()
			assert.Equal(t, 1, stats)
			assert.Equal(t, 1, lists)
			assert.Len(t, opens, 1)
			assert.Empty(t, c.Sleeps())
		})
	}
}

func TestGivesUpAfterMaxAttempts(t *testing.T) {
	f := newFake()
	for range 10 {
		f.listFaults = append(f.listFaults, unavailable)
	}
	c := newClock()
	b := New(f, c.config(Config{MaxAttempts: 6, BaseDelay: time.Second, MaxDelay: 3 * time.Second}))

	_, err := b.List(context.Background(), &bucket.ListRequest{Prefix: "p/"})
	require.ErrorIs(t, err, bucket.ErrUnavailable)
	assert.True(t, bucket.IsRetryable(err), "callers above may still decide to retry later")
	assert.Contains(t, err.Error(), "6 attempts")
	_, lists, _, _ := f.snapshot()
	assert.Equal(t, 6, lists)
	// Ceilings double from BaseDelay and are capped at MaxDelay.
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second}, c.Sleeps())
}

func TestMaxAttemptsOneNeverRetries(t *testing.T) {
	f := newFake()
	f.statFaults = []error{unavailable}
	c := newClock()
	b := New(f, c.config(Config{MaxAttempts: 1}))
	_, err := b.Stat(context.Background(), &bucket.StatRequest{Name: "a"})
	require.ErrorIs(t, err, bucket.ErrUnavailable)
	assert.Empty(t, c.Sleeps())
}

func TestMaxElapsedBoundsRetries(t *testing.T) {
	f := newFake()
	for range 10 {
		f.statFaults = append(f.statFaults, unavailable)
	}
	c := newClock()
	b := New(f, c.config(Config{MaxAttempts: 100, BaseDelay: ms(400), MaxDelay: time.Hour, MaxElapsed: time.Second}))

	_, err := b.Stat(context.Background(), &bucket.StatRequest{Name: "a"})
	require.ErrorIs(t, err, bucket.ErrUnavailable)
	// 400ms, then 800ms clipped to the 600ms left, then the budget is spent.
	assert.Equal(t, []time.Duration{ms(400), ms(600)}, c.Sleeps())
	stats, _, _, _ := f.snapshot()
	assert.Equal(t, 3, stats)
}

// ferry's mount sets only MaxElapsed (--retry-max-time): a store that is
// back within it must be reached, however many attempts that takes.
func TestMaxElapsedAloneOutlastsAnOutage(t *testing.T) {
	f := newFake()
	for range 10 {
		f.statFaults = append(f.statFaults, unavailable)
	}
	c := newClock()
	b := New(f, c.config(Config{MaxElapsed: 30 * time.Second}))

	_, err := b.Stat(context.Background(), &bucket.StatRequest{Name: "a"})
	require.NoError(t, err, "10 failures and %v of backoff fit in a 30s budget", sum(c.Sleeps()))
	stats, _, _, _ := f.snapshot()
	assert.Equal(t, 11, stats)
	assert.Greater(t, sum(c.Sleeps()), 20*time.Second, "the outage lasted most of the budget")
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

func TestRetryAfterHint(t *testing.T) {
	t.Run("waits at least the hint", func(t *testing.T) {
		f := newFake()
		f.statFaults = []error{bucket.WithRetryAfter(unavailable, 2*time.Second)}
		c := newClock()
		b := New(f, c.config(Config{}))
		_, err := b.Stat(context.Background(), &bucket.StatRequest{Name: "a"})
		require.NoError(t, err)
		assert.Equal(t, []time.Duration{2 * time.Second}, c.Sleeps())
	})
	t.Run("backoff longer than hint wins", func(t *testing.T) {
		f := newFake()
		f.statFaults = []error{bucket.WithRetryAfter(unavailable, ms(1))}
		c := newClock()
		b := New(f, c.config(Config{BaseDelay: ms(50)}))
		_, err := b.Stat(context.Background(), &bucket.StatRequest{Name: "a"})
		require.NoError(t, err)
		assert.Equal(t, []time.Duration{ms(50)}, c.Sleeps())
	})
	t.Run("hint beyond MaxElapsed gives up without waiting", func(t *testing.T) {
		f := newFake()
		f.statFaults = []error{bucket.WithRetryAfter(unavailable, 2*time.Minute)}
		c := newClock()
		b := New(f, c.config(Config{MaxElapsed: time.Minute}))
		_, err := b.Stat(context.Background(), &bucket.StatRequest{Name: "a"})
		require.ErrorIs(t, err, bucket.ErrUnavailable)
		d, ok := bucket.RetryAfter(err)
		assert.True(t, ok, "the hint stays visible to callers")
		assert.Equal(t, 2*time.Minute, d)
		assert.Empty(t, c.Sleeps())
		stats, _, _, _ := f.snapshot()
		assert.Equal(t, 1, stats)
	})
}

func TestCancelWhileWaiting(t *testing.T) {
	f := newFake()
	f.statFaults = []error{unavailable, unavailable, unavailable}
	c := newClock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.onWait = func(time.Duration) { cancel() }
	b := New(f, c.config(Config{}))

	_, err := b.Stat(ctx, &bucket.StatRequest{Name: "a"})
	require.ErrorIs(t, err, bucket.ErrCanceled)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, bucket.ErrUnavailable, "the failure being retried stays visible")
	assert.False(t, bucket.IsRetryable(err))
	stats, _, _, _ := f.snapshot()
	assert.Equal(t, 1, stats)
}

// cutOffSecondCall is a fake whose second call (List or open) is still in
// flight when the caller's deadline comes.
type cutOffSecondCall struct {
	*fake
	cancel context.CancelFunc
	calls  int
}

func (d *cutOffSecondCall) cutOff(ctx context.Context) error {
	if d.calls++; d.calls == 2 {
		d.cancel()
		return fmt.Errorf("fake: %w", ctx.Err())
	}
	return nil
}

func (d *cutOffSecondCall) List(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	if err := d.cutOff(ctx); err != nil {
		return nil, err
	}
	return d.fake.List(ctx, req)
}

func (d *cutOffSecondCall) NewRangeReader(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	if err := d.cutOff(ctx); err != nil {
		return nil, err
	}
	return d.fake.NewRangeReader(ctx, req)
}

// A deadline that ends an attempt in flight does not hide why the attempts
// before it failed (ferry's mount probe reports this error to the user),
// and the error still matches only the cancellation.
func TestDeadlineDuringAnAttemptKeepsTheFailureBefore(t *testing.T) {
	refused := fmt.Errorf("%w: dial tcp 127.0.0.1:1: connect: connection refused", bucket.ErrUnavailable)
	f := newFake()
	f.listFaults = []error{refused}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := New(&cutOffSecondCall{fake: f, cancel: cancel}, newClock().config(Config{}))

	_, err := b.List(ctx, &bucket.ListRequest{})
	require.ErrorIs(t, err, bucket.ErrCanceled)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "connection refused")
	assert.NotErrorIs(t, err, bucket.ErrUnavailable, "to errors.Is, a cancellation and nothing else")
	assert.False(t, bucket.IsRetryable(err))

	// A reader's resume: the reopen after a broken body is cut off.
	f = newFake()
	f.bodyFaults = []bodyFault{{after: 2, err: reset}}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	b = New(&cutOffSecondCall{fake: f, cancel: cancel}, newClock().config(Config{}))
	rc, err := b.NewRangeReader(ctx, &bucket.ReadRequest{Name: "a", Version: "v1", Range: rng(0, 20)})
	require.NoError(t, err)
	_, err = io.ReadAll(rc)
	require.ErrorIs(t, err, bucket.ErrCanceled)
	assert.Contains(t, err.Error(), "connection reset")
	assert.NotErrorIs(t, err, bucket.ErrUnavailable)
	require.NoError(t, rc.Close())

	// Without an attempt before it, the error is the attempt's own.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	d := &cutOffSecondCall{fake: newFake(), cancel: cancel, calls: 1}
	_, err = New(d, newClock().config(Config{})).List(ctx, &bucket.ListRequest{})
	require.ErrorIs(t, err, bucket.ErrCanceled)
	assert.NotContains(t, err.Error(), "attempt before")
}

// A backend that forgot bucket.ContextError must still not be retried once
// the caller has given up.
func TestCancelledContextIsNotRetried(t *testing.T) {
	f := newFake()
	f.statFaults = []error{unavailable, unavailable}
	c := newClock()
	b := New(f, c.config(Config{}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Stat(ctx, &bucket.StatRequest{Name: "a"})
	require.ErrorIs(t, err, bucket.ErrCanceled)
	assert.Empty(t, c.Sleeps())
}

func TestRealSleepHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Would block for an hour if ctx were ignored.
	require.ErrorIs(t, sleep(ctx, time.Hour), context.Canceled)
	require.NoError(t, sleep(context.Background(), 0))
}

func TestDefaultJitterStaysInRange(t *testing.T) {
	cfg := Config{}.withDefaults()
	for range 1000 {
		d := cfg.Jitter(ms(100))
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, ms(100))
	}
	assert.Equal(t, time.Duration(0), cfg.Jitter(0))
}

func TestListPassesRequestThrough(t *testing.T) {
	f := newFake()
	f.listFaults = []error{unavailable}
	c := newClock()
	b := New(f, c.config(Config{}))
	l, err := b.List(context.Background(), &bucket.ListRequest{Prefix: "dir/", Delimiter: "/"})
	require.NoError(t, err)
	assert.Equal(t, []string{"dir/x/"}, l.Prefixes)
}

func readAll(t *testing.T, b bucket.Bucket, req *bucket.ReadRequest) ([]byte, error) {
	t.Helper()
	rc, err := b.NewRangeReader(context.Background(), req)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(rc)
	require.NoError(t, rc.Close())
	return data, err
}

func TestOpenRetried(t *testing.T) {
	f := newFake()
	f.openFaults = []error{unavailable, unavailable}
	c := newClock()
	b := New(f, c.config(Config{}))
	data, err := readAll(t, b, &bucket.ReadRequest{Name: "a", Version: "v1", Range: rng(2, 6)})
	require.NoError(t, err)
	assert.Equal(t, "2345", string(data))
	_, _, opens, open := f.snapshot()
	assert.Len(t, opens, 3)
	assert.Equal(t, 0, open, "every body closed")
}

func TestReaderResumesMidBody(t *testing.T) {
	for _, withBytes := range []bool{false, true} {
		t.Run(fmt.Sprintf("withBytes=%v", withBytes), func(t *testing.T) {
			f := newFake()
			f.bodyFaults = []bodyFault{{after: 5, err: reset, withBytes: withBytes}}
			c := newClock()
			b := New(f, c.config(Config{}))

			data, err := readAll(t, b, &bucket.ReadRequest{Name: "a", Version: "v1", Range: rng(2, 100)})
			require.NoError(t, err)
			assert.Equal(t, "23456789abcdefghij", string(data))
			_, _, opens, open := f.snapshot()
			assert.Equal(t, []bucket.ReadRequest{
				{Name: "a", Version: "v1", Range: rng(2, 100)},
				{Name: "a", Version: "v1", Range: rng(7, 100)}, // same version, at the byte reached
			}, opens)
			assert.Equal(t, []time.Duration{ms(100)}, c.Sleeps(), "one retry")
			assert.Equal(t, 0, open, "the broken body was closed too")
		})
	}
}

func TestReaderResumeSharesAttemptBudget(t *testing.T) {
	f := newFake()
	f.openFaults = []error{unavailable} // attempt 1 fails at open
	f.bodyFaults = []bodyFault{
		{after: 3, err: shortBody}, // attempt 2
		{after: 3, err: reset},     // attempt 3
		{after: 3, err: reset},     // attempt 4: budget spent
	}
	c := newClock()
	b := New(f, c.config(Config{MaxAttempts: 4}))

	data, err := readAll(t, b, &bucket.ReadRequest{Name: "a", Version: "v1", Range: rng(0, 20)})
	require.ErrorIs(t, err, bucket.ErrUnavailable)
	assert.Contains(t, err.Error(), "4 attempts")
	assert.Equal(t, "012345678", string(data), "bytes before the final failure are delivered once, in order")
	_, _, opens, open := f.snapshot()
	assert.Len(t, opens, 4)
	assert.Equal(t, 0, open)
}

func TestResumeOfChangedObjectFailsWithPrecondition(t *testing.T) {
	f := newFake()
	f.bodyFaults = []bodyFault{{after: 4, err: reset}}
	f.afterOpen = func(f *fake) {
		f.objects["a"] = fakeObject{data: []byte("XXXXXXXXXXXXXXXXXXXX"), version: "v2"}
	}
	c := newClock()
	b := New(f, c.config(Config{}))
	data, err := readAll(t, b, &bucket.ReadRequest{Name: "a", Version: "v1", Range: rng(0, 20)})
	require.ErrorIs(t, err, bucket.ErrPrecondition)
	assert.Equal(t, "0123", string(data), "no byte of v2")
	_, _, opens, _ := f.snapshot()
	assert.Len(t, opens, 2, "a precondition failure is not retried")
}

func TestUnpinnedReadIsOnlyResumedBeforeFirstByte(t *testing.T) {
	t.Run("after bytes: fails", func(t *testing.T) {
		f := newFake()
		f.bodyFaults = []bodyFault{{after: 4, err: reset}}
		c := newClock()
		b := New(f, c.config(Config{}))
		data, err := readAll(t, b, &bucket.ReadRequest{Name: "a", Range: rng(0, 20)})
		require.ErrorIs(t, err, bucket.ErrUnavailable)
		assert.Equal(t, "0123", string(data))
		_, _, opens, open := f.snapshot()
		assert.Len(t, opens, 1)
		assert.Equal(t, 0, open)
	})
	t.Run("before any byte: reopened", func(t *testing.T) {
		f := newFake()
		f.bodyFaults = []bodyFault{{after: 0, err: reset}}
		c := newClock()
		b := New(f, c.config(Config{}))
		data, err := readAll(t, b, &bucket.ReadRequest{Name: "a", Range: rng(10, 20)})
		require.NoError(t, err)
		assert.Equal(t, "abcdefghij", string(data))
		_, _, opens, _ := f.snapshot()
		assert.Len(t, opens, 2)
	})
}

func TestNonRetryableBodyErrorIsReturned(t *testing.T) {
	f := newFake()
	f.bodyFaults = []bodyFault{{after: 2, err: bucket.ErrPermission}}
	c := newClock()
	b := New(f, c.config(Config{}))
	data, err := readAll(t, b, &bucket.ReadRequest{Name: "a", Version: "v1", Range: rng(0, 20)})
	require.ErrorIs(t, err, bucket.ErrPermission)
	assert.Equal(t, "01", string(data))
	assert.Empty(t, c.Sleeps())
}

func TestReaderCancelledWhileResuming(t *testing.T) {
	f := newFake()
	f.bodyFaults = []bodyFault{{after: 2, err: reset}}
	c := newClock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.onWait = func(time.Duration) { cancel() }
	b := New(f, c.config(Config{}))
	rc, err := b.NewRangeReader(ctx, &bucket.ReadRequest{Name: "a", Version: "v1", Range: rng(0, 20)})
	require.NoError(t, err)
	data, err := io.ReadAll(rc)
	require.ErrorIs(t, err, bucket.ErrCanceled)
	assert.Equal(t, "01", string(data))
	require.NoError(t, rc.Close())
	_, _, opens, open := f.snapshot()
	assert.Len(t, opens, 1)
	assert.Equal(t, 0, open)
}

func TestReaderCloseAndReadAfterClose(t *testing.T) {
	f := newFake()
	c := newClock()
	b := New(f, c.config(Config{}))
	rc, err := b.NewRangeReader(context.Background(), &bucket.ReadRequest{Name: "a", Version: "v1", Range: rng(0, 20)})
	require.NoError(t, err)
	p := make([]byte, 3)
	n, err := rc.Read(p)
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	require.NoError(t, rc.Close())
	require.NoError(t, rc.Close(), "second Close is harmless")
	_, err = rc.Read(p)
	assert.ErrorIs(t, err, bucket.ErrInvalid)
	_, _, _, open := f.snapshot()
	assert.Equal(t, 0, open)
}

func TestEmptyRangeAtResumePointEndsWithEOF(t *testing.T) {
	// The body fails after its last byte: the resume opens an empty range,
	// which still checks the object and then yields io.EOF.
	f := newFake()
	f.bodyFaults = []bodyFault{{after: 4, err: shortBody, withBytes: true}}
	c := newClock()
	b := New(f, c.config(Config{}))
	data, err := readAll(t, b, &bucket.ReadRequest{Name: "a", Version: "v1", Range: rng(16, 20)})
	require.NoError(t, err)
	assert.Equal(t, "ghij", string(data))
	_, _, opens, _ := f.snapshot()
	require.Len(t, opens, 2)
	assert.Equal(t, rng(20, 20), opens[1].Range)
}

func TestLogsAndReportsEachRetry(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var mu sync.Mutex
	var ops []string
	f := newFake()
	f.statFaults = []error{unavailable}
	f.listFaults = []error{unavailable, unavailable}
	f.bodyFaults = []bodyFault{{after: 1, err: reset}}
	c := newClock()
	b := New(f, c.config(Config{Logger: logger, OnRetry: func(op string, err error) {
		require.True(t, bucket.IsRetryable(err))
		mu.Lock()
		ops = append(ops, op)
		mu.Unlock()
	}}))
	ctx := context.Background()
	_, err := b.Stat(ctx, &bucket.StatRequest{Name: "a"})
	require.NoError(t, err)
	_, err = b.List(ctx, &bucket.ListRequest{Prefix: "p/"})
	require.NoError(t, err)
	_, err = readAll(t, b, &bucket.ReadRequest{Name: "a", Version: "v1", Range: rng(0, 5)})
	require.NoError(t, err)

	assert.Equal(t, []string{OpStat, OpList, OpList, OpRead}, ops)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 4)
	for _, l := range lines {
		assert.Contains(t, l, "level=DEBUG")
		assert.Contains(t, l, "bucket=fake://b")
	}
	assert.Contains(t, lines[3], "op=read")
}

func TestConcurrentUse(t *testing.T) {
	f := newFake()
	for range 50 {
		f.statFaults = append(f.statFaults, unavailable, nil)
		f.bodyFaults = append(f.bodyFaults, bodyFault{after: 3, err: reset})
	}
	c := newClock()
	b := New(f, c.config(Config{MaxAttempts: 100}))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				_, err := b.Stat(context.Background(), &bucket.StatRequest{Name: "a"})
				assert.NoError(t, err)
				data, err := readAll(t, b, &bucket.ReadRequest{Name: "a", Version: "v1", Range: rng(0, 20)})
				assert.NoError(t, err)
				assert.Equal(t, "0123456789abcdefghij", string(data))
			}
		})
	}
	wg.Wait()
	_, _, _, open := f.snapshot()
	assert.Equal(t, 0, open)
}

func rng(start, limit uint64) bucket.ByteRange { return bucket.ByteRange{Start: start, Limit: limit} }

// TestResumeBudget: with no attempt cap, a body that keeps failing
// without real progress is bounded by MaxElapsed from its first failure;
// one that makes real progress before each failure gets a fresh budget
// each time and completes, however long the whole transfer takes.
func TestResumeBudget(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 4<<20)
	for _, tc := range []struct {
		name  string
		after int
		ok    bool
	}{
		{"trickle", 1 << 10, false},
		{"progress", minProgress + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.objects["big"] = fakeObject{data: big, version: "v1"}
			for range 1000 {
				f.bodyFaults = append(f.bodyFaults, bodyFault{after: tc.after, err: reset})
			}
			c := newClock()
			b := New(f, c.config(Config{MaxElapsed: 10 * time.Second}))
			data, err := readAll(t, b, &bucket.ReadRequest{Name: "big", Version: "v1", Range: rng(0, uint64(len(big)))})
			_, _, opens, _ := f.snapshot()
			if tc.ok {
				require.NoError(t, err)
				assert.Equal(t, big, data)
				assert.Greater(t, sum(c.Sleeps()), 10*time.Second, "longer than one budget in all")
				return
			}
			require.ErrorIs(t, err, bucket.ErrUnavailable)
			assert.Less(t, len(opens), 100, "the budget, not the object's end, stopped it")
			assert.LessOrEqual(t, sum(c.Sleeps()), 10*time.Second)
		})
	}
}

// pacedBucket serves fake's bytes chunk bytes at a time, every gap, as a
// store that trickles does; its bodies end when their context does (a
// cancelled request).
type pacedBucket struct {
	*fake
	chunk int
	gap   time.Duration
}

func (p *pacedBucket) NewRangeReader(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	rc, err := p.fake.NewRangeReader(ctx, req)
	if err != nil {
		return nil, err
	}
	return &pacedBody{ReadCloser: rc, ctx: ctx, p: p}, nil
}

type pacedBody struct {
	io.ReadCloser
	ctx context.Context
	p   *pacedBucket
}

func (b *pacedBody) Read(buf []byte) (int, error) {
	select {
	case <-time.After(b.p.gap):
	case <-b.ctx.Done():
		return 0, fmt.Errorf("paced body: %w", b.ctx.Err())
	}
	return b.ReadCloser.Read(buf[:min(len(buf), b.p.chunk)])
}

// TestSlowBodyIsCutOff: a store that trickles bytes (never silent long
// enough for a silence timeout) is abandoned after SlowWindow without
// SlowBytes and the read fails within the retry budget, instead of taking
// as long as the trickle; a slow store above the floor is left alone.
func TestSlowBodyIsCutOff(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB
	for _, tc := range []struct {
		name  string
		chunk int
		ok    bool
	}{
		{"trickle", 1, false},          // 1 byte per 10 ms: 41 s for the object
		{"slow but moving", 512, true}, // 512 bytes per 10 ms
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.objects["o"] = fakeObject{data: data, version: "v1"}
			p := &pacedBucket{fake: f, chunk: tc.chunk, gap: 10 * time.Millisecond}
			c := newClock()
			b := New(p, c.config(Config{MaxElapsed: time.Second, SlowWindow: 150 * time.Millisecond, SlowBytes: 1 << 10}))
			start := time.Now()
			got, err := readAll(t, b, &bucket.ReadRequest{Name: "o", Version: "v1", Range: rng(0, uint64(len(data)))})
			t.Logf("%v after %v", err, time.Since(start).Round(time.Millisecond))
			if tc.ok {
				require.NoError(t, err)
				assert.Equal(t, data, got)
				return
			}
			require.ErrorIs(t, err, bucket.ErrUnavailable)
			assert.Contains(t, err.Error(), "fewer than 1024 bytes")
			assert.Less(t, time.Since(start), 20*time.Second, "the trickle, not the budget, decided")
		})
	}
}
