// Package gcs is ferry's Google Cloud Storage backend: bucket.Bucket and
// bucket.Writer on cloud.google.com/go/storage, reading ranges through the
// XML API and stat/list/put/delete through the JSON API, against real GCS
// or fake-gcs-server.
//
// It must never retry on its own (the library's retries are switched off
// and a read never silently reopens its body: ferry's retry decorator owns
// retries), and it must never return bytes of a generation other than the
// one a read was pinned to.
//
// fake-gcs-server (v1.56.1) differs from GCS in ways this package covers
// itself, so the same code is correct on both:
//
//   - Read preconditions are ignored (x-goog-if-generation-match on an XML
//     GET/HEAD). A pinned read therefore also compares the generation the
//     response reports (x-goog-generation) with the pinned one and fails
//     with ErrPrecondition before handing out the reader. Only one
//     response is ever read per reader (the library's reopen after a
//     broken body is refused), so no later response can switch version.
//   - A range starting at or past the end, including any range of a
//     zero-byte object, is 416. The read then checks existence and
//     generation with a body-less request and yields no bytes.
//   - List: maxResults bounds only objects, every prefix at or after the
//     page token comes back on every page, and the next-page token is the
//     next object's name. List therefore slices an over-full page to
//     MaxResults itself, and its continuation token remembers the last
//     entry and last prefix returned so that repeated prefixes are dropped
//     (harmless on GCS, whose pages never repeat or overflow).
//
// Emulator gaps this package cannot cover (tests avoid them): the
// filesystem backend (emulator.StartGCS) stores no directory markers (a
// Put of "dir/" succeeds and stores nothing) and cannot hold "a" next to
// "a/b", so the conformance suite runs on the memory backend; generations
// are microsecond timestamps, so two writes of one name within the same
// microsecond would share a generation.
package gcs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/option"
	htransport "google.golang.org/api/transport/http"

	"ferry/bucket"
)

// DefaultEndpoint is the GCS JSON API root.
const DefaultEndpoint = "https://storage.googleapis.com/storage/v1/"

// defaultMaxConnections bounds connections per host when Config leaves it 0.
const defaultMaxConnections = 64

// Config says which bucket to open and how to reach it.
type Config struct {
	// Bucket name, without "gs://".
	Bucket string
	// Endpoint is "" for real GCS, or an emulator root such as
	// "http://127.0.0.1:4443" or its JSON root ".../storage/v1/".
	// Ranged reads go to the same host.
	Endpoint string
	// Anonymous sends no credentials (public buckets, emulators).
	Anonymous bool
	// KeyFile is a service account JSON key; "" uses the default
	// credential chain (GOOGLE_APPLICATION_CREDENTIALS, gcloud, metadata).
	KeyFile string
	// BillingProject is charged for requests (requester-pays buckets).
	BillingProject string
	// MaxConnections bounds concurrent connections to the endpoint; 0
	// means 64.
	MaxConnections int

	// Timeouts bounding a dead or stalled store; 0 means the default.
	// DialTimeout: TCP connect. ResponseHeaderTimeout: request sent to
	// first response header. ReadTimeout: silence while reading a body
	// (a stalled body fails with ErrUnavailable, so the retry decorator
	// reopens it instead of a FUSE read hanging).
	DialTimeout, ResponseHeaderTimeout, ReadTimeout time.Duration
}

// Defaults for the zero timeouts of Config (the same as package s3's).
const (
	DefaultDialTimeout           = 10 * time.Second
	DefaultResponseHeaderTimeout = 30 * time.Second
	DefaultReadTimeout           = 60 * time.Second
)

// Bucket reads (and for staging, writes) one GCS bucket. Safe for
// concurrent use.
type Bucket struct {
	// Dependencies
	client *storage.Client
	bkt    *storage.BucketHandle

	// Constant data
	name        string
	readTimeout time.Duration // body silence before a read fails
}

var (
	_ bucket.Bucket = (*Bucket)(nil)
	_ bucket.Writer = (*Bucket)(nil)
)

// New opens the bucket described by cfg. It does not contact the store
// (apart from credential discovery); a missing bucket shows up as
// ErrNotFound on first use.
func New(ctx context.Context, cfg Config) (*Bucket, error) {
	if cfg.Bucket == "" || strings.ContainsAny(cfg.Bucket, "/") {
		return nil, fmt.Errorf("gcs: bucket name %q: %w", cfg.Bucket, bucket.ErrInvalid)
	}
	if cfg.Anonymous && cfg.KeyFile != "" {
		return nil, fmt.Errorf("gcs: anonymous access and a key file are exclusive: %w", bucket.ErrInvalid)
	}
	endpoint, err := jsonEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	maxConns := cfg.MaxConnections
	if maxConns <= 0 {
		maxConns = defaultMaxConnections
	}

	orDefault := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	orDefault(&cfg.DialTimeout, DefaultDialTimeout)
	orDefault(&cfg.ResponseHeaderTimeout, DefaultResponseHeaderTimeout)
	orDefault(&cfg.ReadTimeout, DefaultReadTimeout)

	var rt http.RoundTripper = &stallTransport{
		base:    newBaseTransport(maxConns, cfg.DialTimeout, cfg.ResponseHeaderTimeout),
		timeout: cfg.ReadTimeout,
	}
	opts := []option.ClientOption{
		option.WithEndpoint(endpoint),
		storage.WithDisabledClientMetrics(), // never export telemetry
	}
	if cfg.Anonymous {
		opts = append(opts, option.WithoutAuthentication())
	} else {
		// Our own transport (for its limits and timeouts) means the library
		// does not add credentials itself: wrap it with them here.
		credOpts := []option.ClientOption{option.WithScopes(storage.ScopeFullControl)}
		if cfg.KeyFile != "" {
			credOpts = append(credOpts, option.WithAuthCredentialsFile(option.ServiceAccount, cfg.KeyFile))
		}
		rt, err = htransport.NewTransport(ctx, rt, credOpts...)
		if err != nil {
			if cfg.KeyFile == "" && !defaultCredentialsGiven() {
				return nil, &noCredentialsError{err: err}
			}
			return nil, fmt.Errorf("gcs: credentials: %w: %w", bucket.ErrPermission, err)
		}
		opts = append(opts, credOpts...)
	}
	opts = append(opts, option.WithHTTPClient(&http.Client{Transport: singleResponseTransport{rt}}))

	client, err := storage.NewClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("gcs: %w: %w", bucket.ErrInvalid, err)
	}
	client.SetRetry(storage.WithPolicy(storage.RetryNever))
	bkt := client.Bucket(cfg.Bucket)
	if cfg.BillingProject != "" {
		bkt = bkt.UserProject(cfg.BillingProject)
	}
	return &Bucket{client: client, bkt: bkt, name: "gs://" + cfg.Bucket, readTimeout: cfg.ReadTimeout}, nil
}

// ErrNoCredentials is matched by New's error when it found no credentials
// at all: no key file, none in GOOGLE_APPLICATION_CREDENTIALS or gcloud's
// application default credentials, and no metadata server (not on Google
// Cloud). It comes with bucket.ErrPermission. A public bucket needs
// Config.Anonymous instead.
var ErrNoCredentials = errors.New("no credentials found")

// noCredentialsError says once that there are none, rather than the
// library's text after ours.
type noCredentialsError struct{ err error }

func (e *noCredentialsError) Error() string {
	return "gcs: no credentials found (no GOOGLE_APPLICATION_CREDENTIALS, no gcloud application default credentials, not on Google Cloud)"
}

func (e *noCredentialsError) Unwrap() []error {
	return []error{ErrNoCredentials, bucket.ErrPermission, e.err}
}

// defaultCredentialsGiven reports whether the places the library reads
// credentials from besides the metadata server name some: the environment
// variable, or gcloud's well-known file. When one does and still fails, the
// library's own error says what is wrong with it.
func defaultCredentialsGiven() bool {
	if os.Getenv("GOOGLE_APPLICATION_CREDENTIALS") != "" {
		return true
	}
	dir := os.Getenv("CLOUDSDK_CONFIG")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return false
		}
		dir = filepath.Join(home, ".config", "gcloud")
	}
	_, err := os.Stat(filepath.Join(dir, "application_default_credentials.json"))
	return err == nil
}

// Close releases idle connections.
func (b *Bucket) Close() error { return b.client.Close() }

// jsonEndpoint turns "", "http://h:p", "http://h:p/" or
// "http://h:p/storage/v1[/]" into the JSON root the library wants. The
// library sends XML reads to the same scheme and host.
func jsonEndpoint(raw string) (string, error) {
	if raw == "" {
		return DefaultEndpoint, nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		return "", fmt.Errorf("gcs: endpoint %q: want http(s)://host[:port][/storage/v1/]: %w", raw, bucket.ErrInvalid)
	}
	switch strings.TrimSuffix(u.Path, "/") {
	case "", "/storage/v1":
	default:
		return "", fmt.Errorf("gcs: endpoint %q: path must be empty or /storage/v1/: %w", raw, bucket.ErrInvalid)
	}
	return u.Scheme + "://" + u.Host + "/storage/v1/", nil
}

// newBaseTransport speaks HTTP/1.1 so that each concurrent read gets its
// own TCP connection (one HTTP/2 connection caps throughput), keeping up
// to maxConns idle for reuse. Concurrent requests are not capped here:
// readahead bounds the reads (--max-connections), and a cap per host
// made lookups and listings queue behind them, outside every timeout.
// The timeouts make an unreachable or hung endpoint fail in bounded time
// instead of holding a FUSE read forever.
func newBaseTransport(maxConns int, dialTimeout, headerTimeout time.Duration) *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   dialTimeout,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          maxConns,
		MaxIdleConnsPerHost:   maxConns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: headerTimeout,
		ExpectContinueTimeout: time.Second,
		// Ranged reads must arrive byte-exact, never transparently gunzipped.
		DisableCompression: true,
	}
}

// Name is "gs://bucket".
func (b *Bucket) Name() string { return b.name }

// Stat returns the object's current generation as its Version.
func (b *Bucket) Stat(ctx context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
	if req.Name == "" {
		return nil, fmt.Errorf("gcs: stat: empty name: %w", bucket.ErrInvalid)
	}
	sctx, stalled := watchStalls(ctx)
	attrs, err := b.bkt.Object(req.Name).Attrs(sctx)
	if err != nil {
		if stalled.Load() && ctx.Err() == nil {
			return nil, stallError("stat", req.Name, b.readTimeout)
		}
		return nil, mapError(ctx, "stat", req.Name, err)
	}
	o := objectFromAttrs(attrs)
	return &o, nil
}

func objectFromAttrs(a *storage.ObjectAttrs) bucket.Object {
	return bucket.Object{
		Name:    a.Name,
		Size:    uint64(a.Size),
		Version: strconv.FormatInt(a.Generation, 10),
		Updated: a.Updated,
		CRC32C:  a.CRC32C,
		// The library decodes a missing crc32c as 0. GCS always sends one;
		// 0 is also the CRC of the empty object. Claiming no CRC for the
		// 1-in-2^32 non-empty object whose CRC is 0 only skips a check.
		HasCRC32C: a.CRC32C != 0 || a.Size == 0,
	}
}

// Put uploads the object in one request (ChunkSize 0: no resumable
// session, no library buffer, no library retry).
func (b *Bucket) Put(ctx context.Context, req *bucket.PutRequest) (*bucket.Object, error) {
	if req.Name == "" {
		return nil, fmt.Errorf("gcs: put: empty name: %w", bucket.ErrInvalid)
	}
	// Cancelling wctx aborts the upload if Write or Close fails.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := b.bkt.Object(req.Name).NewWriter(wctx)
	w.ChunkSize = 0
	if _, err := w.Write(req.Data); err != nil {
		_ = w.Close()
		return nil, mapError(ctx, "put", req.Name, err)
	}
	if err := w.Close(); err != nil {
		return nil, mapError(ctx, "put", req.Name, err)
	}
	o := objectFromAttrs(w.Attrs())
	return &o, nil
}

// Delete removes the current generation of the object.
func (b *Bucket) Delete(ctx context.Context, name string) error {
	if name == "" {
		return fmt.Errorf("gcs: delete: empty name: %w", bucket.ErrInvalid)
	}
	if err := b.bkt.Object(name).Delete(ctx); err != nil {
		return mapError(ctx, "delete", name, err)
	}
	return nil
}

// singleResponseTransport refuses a second request for the same reader.
// storage.Reader reopens its body at the offset reached when the body
// fails mid-stream; ferry's retry decorator owns retries, and a refused
// reopen turns the failure into an ErrUnavailable the caller sees.
type singleResponseTransport struct {
	base http.RoundTripper
}

// readerAttemptKey marks a read's context; its value is a *atomic.Bool set
// once the read has sent its request.
type readerAttemptKey struct{}

// errReopenRefused is what the library sees when it tries to resume.
var errReopenRefused = fmt.Errorf("gcs: response body ended early, not resuming: %w", io.ErrUnexpectedEOF)

func (t singleResponseTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if sent, ok := req.Context().Value(readerAttemptKey{}).(*atomic.Bool); ok && sent.Swap(true) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errReopenRefused
	}
	return t.base.RoundTrip(req)
}
