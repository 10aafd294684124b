// Package connect turns a bucket URL and options into the stacked store
// ferry reads through: metrics(retry(prefix(backend))). Prefix is innermost
// so that retry and metrics see the requests the store really gets; metrics
// is outermost so that it sees what callers got, and counts the retries
// made below it through retry.Config.OnRetry. The retry decorator's circuit
// breaker is on: once an operation has spent its whole retry budget, every
// operation fails at once until the store answers a probe again.
//
// It must never put credentials into names, logs or errors, and never
// silently ignore an option that does not apply to the URL's scheme.
package connect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ferry/bucket"
	"ferry/bucket/file"
	"ferry/bucket/gcs"
	"ferry/bucket/metrics"
	"ferry/bucket/prefix"
	"ferry/bucket/retry"
	"ferry/bucket/s3"
)

// Options says how to reach the store. Zero values are the defaults; an
// option set for a scheme it does not apply to is an error (bucket.ErrInvalid).
type Options struct {
	// Endpoint is a custom server ("http://127.0.0.1:4443"), gs and s3
	// only; "" is the real GCS or AWS.
	Endpoint string
	// Anonymous sends no credentials (public buckets, emulators); gs, s3.
	Anonymous bool
	// Region to sign for (s3 only); "" takes it from the AWS environment.
	Region string
	// S3PathStyle addresses endpoint/bucket/key (most S3-compatible stores).
	S3PathStyle bool
	// AccessKey and SecretKey are static S3 credentials, both or neither;
	// neither uses the AWS default chain (env, shared files, IMDS).
	AccessKey, SecretKey string
	// KeyFile is a GCS service account JSON key; "" uses the default chain.
	KeyFile string
	// BillingProject is charged for requester-pays GCS buckets.
	BillingProject string
	// MaxConnections bounds connections to the store (gs, s3); 0 = default.
	MaxConnections int
	// Timeout bounds each wait on the store (gs, s3): for the response
	// headers, and for the next bytes of a body (a stalled read fails and
	// is retried). The TCP connect timeout is the smaller of it and 10s.
	// 0 keeps the backends' defaults.
	Timeout time.Duration
	// Retry tunes the retry decorator. Its Logger defaults to Logger; its
	// OnRetry, if set, is called after the metrics decorator counts the retry.
	Retry retry.Config
	// Registerer receives the ferry_store_* metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger for retries and backend diagnostics; nil discards.
	Logger *slog.Logger
}

// Stack is an opened store. It is itself a bucket.Bucket (the top of the
// stack, i.e. Metrics) so it can be handed to anything that reads.
type Stack struct {
	// Bucket is the top of the stack: Metrics.
	bucket.Bucket
	// Metrics counts requests, errors, bytes and retries; Snapshot() reads it.
	Metrics *metrics.Bucket
	// Backend is the bare store (a *gcs.Bucket, *s3.Bucket or *file.Bucket),
	// without prefix, retry or metrics. Tests and tools may type-assert it
	// to bucket.Writer to stage data; ferry's mount never writes.
	Backend bucket.Bucket
	// Retry is the retry decorator, whose breaker says whether the store
	// is known down.
	Retry *retry.Bucket
	// Location is the parsed URL.
	Location Location
}

// Close releases the backend's clients (connections, credential refresh).
// The Stack must not be used afterwards.
func (s *Stack) Close() error {
	s.Retry.Close()
	if c, ok := s.Backend.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Open parses rawURL (see ParseURL), builds the backend and stacks the
// decorators. It does not contact the store beyond what the backend needs
// to find credentials; call Probe to check it answers. Errors about the URL
// or options match bucket.ErrInvalid.
func Open(ctx context.Context, rawURL string, opts Options) (*Stack, error) {
	loc, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if err := opts.check(loc.Scheme); err != nil {
		return nil, err
	}
	backend, err := newBackend(ctx, loc, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", loc, err)
	}
	inner, err := prefix.New(backend, loc.Prefix)
	if err != nil {
		return nil, err // unreachable: ParseURL cleaned the prefix already
	}

	rcfg := opts.Retry
	if rcfg.Logger == nil {
		rcfg.Logger = opts.Logger
	}
	rcfg.Breaker = true
	// m is set below, before the stack is returned and can see a request.
	var m *metrics.Bucket
	userOnRetry := rcfg.OnRetry
	rcfg.OnRetry = func(op string, err error) {
		m.RecordRetry(op, err)
		if userOnRetry != nil {
			userOnRetry(op, err)
		}
	}
	r := retry.New(inner, rcfg)
	m = metrics.New(r, opts.Registerer)
	if opts.Registerer != nil {
		registerBreaker(opts.Registerer, r)
	}
	return &Stack{Bucket: m, Metrics: m, Backend: backend, Retry: r, Location: loc}, nil
}

// registerBreaker exports the retry decorator's circuit breaker. A second
// stack on the same registry (tests, tools) keeps the first's.
func registerBreaker(reg prometheus.Registerer, r *retry.Bucket) {
	down := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ferry_store_down",
		Help: "1 while the store is known down: a request spent its whole --retry-max-time on transient failures, and requests fail at once until a probe (every second) finds the store answering.",
	}, func() float64 {
		if r.Down() {
			return 1
		}
		return 0
	})
	trips := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ferry_store_down_total",
		Help: "Times the store was found down (see ferry_store_down).",
	}, func() float64 { return float64(r.Trips()) })
	for _, c := range []prometheus.Collector{down, trips} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				panic(err) // a name clash within ferry's own metrics
			}
		}
	}
}

// check refuses options that do not apply to scheme, so that a flag meant
// for another store is never silently ignored.
func (o Options) check(scheme string) error {
	notFor := func(opt string) error {
		return fmt.Errorf("%w: option %s does not apply to %s:// URLs", bucket.ErrInvalid, opt, scheme)
	}
	if scheme == SchemeFile {
		switch {
		case o.Endpoint != "":
			return notFor("endpoint")
		case o.Anonymous:
			return notFor("anonymous")
		case o.MaxConnections != 0:
			return notFor("max-connections")
		}
	}
	if scheme != SchemeS3 {
		switch {
		case o.Region != "":
			return notFor("region")
		case o.S3PathStyle:
			return notFor("s3-path-style")
		case o.AccessKey != "" || o.SecretKey != "":
			return notFor("access/secret key")
		}
	}
	if scheme != SchemeGCS {
		switch {
		case o.KeyFile != "":
			return notFor("key-file")
		case o.BillingProject != "":
			return notFor("billing-project")
		}
	}
	if o.Timeout < 0 {
		return fmt.Errorf("%w: timeout %v is negative", bucket.ErrInvalid, o.Timeout)
	}
	if o.MaxConnections < 0 {
		return fmt.Errorf("%w: max-connections %d is negative", bucket.ErrInvalid, o.MaxConnections)
	}
	if o.Endpoint != "" {
		u, err := url.Parse(o.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return fmt.Errorf("%w: endpoint must be an http:// or https:// URL without credentials, e.g. http://127.0.0.1:4443", bucket.ErrInvalid)
		}
	}
	return nil
}

func newBackend(ctx context.Context, loc Location, opts Options) (bucket.Bucket, error) {
	switch loc.Scheme {
	case SchemeGCS:
		return gcs.New(ctx, gcs.Config{
			Bucket:                loc.Bucket,
			Endpoint:              opts.Endpoint,
			Anonymous:             opts.Anonymous,
			KeyFile:               opts.KeyFile,
			BillingProject:        opts.BillingProject,
			MaxConnections:        opts.MaxConnections,
			DialTimeout:           dialTimeout(opts.Timeout),
			ResponseHeaderTimeout: opts.Timeout,
			ReadTimeout:           opts.Timeout,
		})
	case SchemeS3:
		return s3.New(ctx, s3.Config{
			Bucket:                loc.Bucket,
			Endpoint:              opts.Endpoint,
			Region:                opts.Region,
			PathStyle:             opts.S3PathStyle,
			Anonymous:             opts.Anonymous,
			AccessKey:             opts.AccessKey,
			SecretKey:             opts.SecretKey,
			MaxConnections:        opts.MaxConnections,
			DialTimeout:           dialTimeout(opts.Timeout),
			ResponseHeaderTimeout: opts.Timeout,
			ReadTimeout:           opts.Timeout,
			Logger:                opts.Logger,
		})
	case SchemeFile:
		return file.New(file.Config{Dir: loc.Dir, Logger: opts.Logger, Registerer: opts.Registerer})
	}
	return nil, fmt.Errorf("%w: unsupported scheme %q", bucket.ErrInvalid, loc.Scheme)
}

// dialTimeout is the TCP connect timeout for a store timeout t: connecting
// takes one round trip, so it never needs more than 10s, nor more than t.
func dialTimeout(t time.Duration) time.Duration {
	if t <= 0 {
		return 0 // the backend's default
	}
	return min(t, 10*time.Second)
}

// ProbeTimeout bounds Probe when ctx has no earlier deadline: long enough
// for a cold credential fetch and TLS handshake, short enough that a
// mount against a dead endpoint fails while the user is still watching.
const ProbeTimeout = 10 * time.Second

// Probe checks that b answers, with one cheap request (a one-entry
// listing of the root), before ferry mounts it. A store that does not
// answer within ProbeTimeout (or ctx's deadline) gives an error matching
// bucket.ErrUnavailable; a missing bucket or bad credentials give the
// store's own error (ErrNotFound, ErrPermission, ...).
func Probe(ctx context.Context, b bucket.Bucket) error {
	timeout := ProbeTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := b.List(pctx, &bucket.ListRequest{Delimiter: "/", MaxResults: 1})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		// The caller gave up; not the store's fault.
		return bucket.ContextError(ctx, err)
	case errors.Is(pctx.Err(), context.DeadlineExceeded):
		// %v, not %w: the inner error matches ErrCanceled (our own
		// timeout), but what this means is that the store is unreachable.
		what := fmt.Sprintf("did not answer within %v (check the endpoint, network and credentials)", timeout.Round(time.Millisecond))
		if errors.Is(err, syscall.ECONNREFUSED) {
			// It answered at once, with a refusal, until the time was up:
			// nothing listens there.
			what = fmt.Sprintf("refused the connection for %v (is the endpoint right? nothing listens there)", timeout.Round(time.Millisecond))
		}
		return fmt.Errorf("%w: %s %s: %v", bucket.ErrUnavailable, b.Name(), what, err)
	default:
		return fmt.Errorf("probe %s: %w", b.Name(), err)
	}
}
