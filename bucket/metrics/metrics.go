// Package metrics is a bucket.Bucket decorator that counts store requests,
// errors by sentinel class, bytes read, retries and request latency, both
// as Prometheus metrics (ferry_store_*) and as a plain atomic Snapshot for
// tests and tools.
//
// It must never change what passes through it: every request, result and
// error reaches the caller exactly as the inner bucket gave it.
package metrics

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ferry/bucket"
)

// Op label values.
const (
	OpStat = "stat"
	OpList = "list"
	OpRead = "read"
)

// Error kind label values, one per bucket sentinel.
const (
	KindCanceled     = "canceled"
	KindNotFound     = "not_found"
	KindPrecondition = "precondition"
	KindPermission   = "permission"
	KindUnavailable  = "unavailable"
	KindInvalid      = "invalid"
	KindOther        = "other"
)

// Kind classifies err by the bucket sentinel it matches. Cancellation is
// checked first: a cancelled transient failure matches both, and it was the
// caller, not the store, that ended it.
func Kind(err error) string {
	switch {
	case errors.Is(err, bucket.ErrCanceled):
		return KindCanceled
	case errors.Is(err, bucket.ErrNotFound):
		return KindNotFound
	case errors.Is(err, bucket.ErrPrecondition):
		return KindPrecondition
	case errors.Is(err, bucket.ErrPermission):
		return KindPermission
	case errors.Is(err, bucket.ErrUnavailable):
		return KindUnavailable
	case errors.Is(err, bucket.ErrInvalid):
		return KindInvalid
	default:
		return KindOther
	}
}

// Snapshot is a point-in-time copy of one Bucket's counters.
type Snapshot struct {
	// Requests by op. A read counts once, when it is opened.
	Stats, Lists, Reads uint64
	// ReadBytes is the body bytes returned to callers.
	ReadBytes uint64
	// Errors returned to callers, all ops and kinds (an open failure and
	// a body failure each count once per reader).
	Errors uint64
	// Retries reported through RecordRetry.
	Retries uint64
}

// Bucket counts what passes through to the bucket it wraps.
type Bucket struct {
	// Dependencies
	inner bucket.Bucket
	prom  *collectors

	// Mutable state: atomics, readable at any time by Snapshot.
	stats, lists, reads, readBytes, errs, retries atomic.Uint64
}

var _ bucket.Bucket = (*Bucket)(nil)

// collectors are the Prometheus metrics. They are shared by every Bucket
// registered on the same Registerer, which then sees the process total.
type collectors struct {
	requests  *prometheus.CounterVec   // {op}
	errors    *prometheus.CounterVec   // {op, kind}
	readBytes prometheus.Counter       //
	duration  *prometheus.HistogramVec // {op}
	retries   *prometheus.CounterVec   // {op}
}

func newCollectors() *collectors {
	return &collectors{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_store_requests_total",
			Help: "Store requests by op (stat, list, read); retries are counted separately.",
		}, []string{"op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_store_errors_total",
			Help: "Store errors returned to callers (after retries), by op and kind (the bucket sentinel matched).",
		}, []string{"op", "kind"}),
		readBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_store_read_bytes_total",
			Help: "Object bytes read from the store.",
		}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ferry_store_request_duration_seconds",
			Help: "Store request latency by op, retries included; for reads, the time to open (first byte), not the whole body.",
			// 1ms .. ~65s
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 17),
		}, []string{"op"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_store_retries_total",
			Help: "Store requests retried after a transient failure, by op.",
		}, []string{"op"}),
	}
}

// register registers c on reg, reusing collectors already registered there
// (a second mount in one process, or tests) so both count into one series.
func (c *collectors) register(reg prometheus.Registerer) {
	c.requests = registerOrReuse(reg, c.requests)
	c.errors = registerOrReuse(reg, c.errors)
	c.readBytes = registerOrReuse(reg, c.readBytes)
	c.duration = registerOrReuse(reg, c.duration)
	c.retries = registerOrReuse(reg, c.retries)
}

func registerOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		// A different metric under our name is a programming error.
		panic(err)
	}
	return c
}

// New wraps b. A nil reg keeps the Prometheus metrics unregistered (the
// Snapshot still counts).
func New(b bucket.Bucket, reg prometheus.Registerer) *Bucket {
	c := newCollectors()
	if reg != nil {
		c.register(reg)
	}
	m := &Bucket{inner: b, prom: c}
	for _, op := range []string{OpStat, OpList, OpRead} {
		// Export zeros so dashboards see the series before the first error.
		c.requests.WithLabelValues(op)
		c.retries.WithLabelValues(op)
	}
	return m
}

// Name is the inner bucket's name.
func (m *Bucket) Name() string { return m.inner.Name() }

// Snapshot returns the counters of this Bucket (not of others sharing its
// Registerer).
func (m *Bucket) Snapshot() Snapshot {
	return Snapshot{
		Stats:     m.stats.Load(),
		Lists:     m.lists.Load(),
		Reads:     m.reads.Load(),
		ReadBytes: m.readBytes.Load(),
		Errors:    m.errs.Load(),
		Retries:   m.retries.Load(),
	}
}

// RecordRetry counts one retry of op; it matches retry.Config.OnRetry, so
// retries made below this decorator show up next to the requests above it.
func (m *Bucket) RecordRetry(op string, _ error) {
	m.retries.Add(1)
	m.prom.retries.WithLabelValues(op).Inc()
}

func (m *Bucket) start(op string, n *atomic.Uint64) time.Time {
	n.Add(1)
	m.prom.requests.WithLabelValues(op).Inc()
	return time.Now()
}

func (m *Bucket) finish(op string, start time.Time, err error) {
	m.prom.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		m.recordError(op, err)
	}
}

func (m *Bucket) recordError(op string, err error) {
	m.errs.Add(1)
	m.prom.errors.WithLabelValues(op, Kind(err)).Inc()
}

// Stat counts and times the inner Stat.
func (m *Bucket) Stat(ctx context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
	start := m.start(OpStat, &m.stats)
	obj, err := m.inner.Stat(ctx, req)
	m.finish(OpStat, start, err)
	return obj, err
}

// List counts and times the inner List.
func (m *Bucket) List(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	start := m.start(OpList, &m.lists)
	l, err := m.inner.List(ctx, req)
	m.finish(OpList, start, err)
	return l, err
}

// NewRangeReader counts the open, times it, and returns a reader that
// counts body bytes and the first body error.
func (m *Bucket) NewRangeReader(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	start := m.start(OpRead, &m.reads)
	rc, err := m.inner.NewRangeReader(ctx, req)
	m.finish(OpRead, start, err)
	if err != nil {
		return nil, err
	}
	return &reader{m: m, rc: rc}, nil
}

// reader counts the bytes of one body. Like any io.Reader it is used by
// one goroutine at a time.
type reader struct {
	m  *Bucket
	rc io.ReadCloser
	// failed is set once a body error was counted, so a caller reading on
	// after an error does not count it again.
	failed bool
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if n > 0 {
		r.m.readBytes.Add(uint64(n))
		r.m.prom.readBytes.Add(float64(n))
	}
	if err != nil && err != io.EOF && !r.failed {
		r.failed = true
		r.m.recordError(OpRead, err)
	}
	return n, err
}

func (r *reader) Close() error { return r.rc.Close() }
