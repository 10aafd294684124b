// Package s3 is ferry's bucket.Bucket (and bucket.Writer) for Amazon S3
// and S3-compatible stores, on aws-sdk-go-v2. An object's Version is its
// ETag (quotes stripped); pinned reads send If-Match and also compare the
// response's ETag, so a store that ignores If-Match still cannot hand out
// bytes of another version. An object the store gives no ETag (some
// gateways in front of a file system) gets a weak version instead, its
// modification time to the second and its size (weak.go), checked on
// every read the same way; a warning says so once.
//
// It must never retry on its own (the SDK's retryer is disabled: ferry's
// retry decorator owns retries and their budget), never string-match
// errors (translate is the one place SDK errors become bucket sentinels),
// and never put credentials in a name, log line or error.
package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	s3sdk "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"ferry/bucket"
)

// Defaults for the zero values of Config.
const (
	DefaultMaxConnections        = 64
	DefaultDialTimeout           = 10 * time.Second
	DefaultResponseHeaderTimeout = 30 * time.Second
	DefaultReadTimeout           = 60 * time.Second
	// defaultRegion signs requests when neither Config nor the
	// environment names one; custom endpoints rarely care.
	defaultRegion = "us-east-1"
)

// Config says which bucket to open and how to reach it.
type Config struct {
	// Bucket name, without "s3://".
	Bucket string
	// Endpoint is a custom base URL ("http://127.0.0.1:7070",
	// "https://storage.example.com"); "" uses AWS.
	Endpoint string
	// Region to sign for; "" takes it from the environment/shared config,
	// else us-east-1.
	Region string
	// PathStyle addresses the bucket as endpoint/bucket/key instead of
	// bucket.endpoint/key (most S3-compatible stores need it).
	PathStyle bool
	// Anonymous sends unsigned requests (public buckets).
	Anonymous bool
	// AccessKey and SecretKey, when both set, are static credentials;
	// otherwise the SDK's default chain (env, shared files, IMDS, ...).
	AccessKey, SecretKey string
	// MaxConnections sizes the HTTP connection pool; 0 means
	// DefaultMaxConnections.
	MaxConnections int

	// Timeouts bounding a dead or stalled store; 0 means the default.
	// DialTimeout: TCP connect. ResponseHeaderTimeout: request sent to
	// first response header. ReadTimeout: silence while reading a body.
	DialTimeout, ResponseHeaderTimeout, ReadTimeout time.Duration
	// Logger receives the warning, once, that the store gives objects no
	// ETag; nil discards it.
	Logger *slog.Logger
}

// Bucket reads (and for tests, writes) one S3 bucket.
type Bucket struct {
	// Dependencies
	client *s3sdk.Client

	// Constant data
	bucket string
	name   string // "s3://" + bucket
	log    *slog.Logger

	// Mutable state
	weakSeen atomic.Bool // an object without an ETag was seen (warned)
}

var (
	_ bucket.Bucket = (*Bucket)(nil)
	_ bucket.Writer = (*Bucket)(nil)
)

// New returns a Bucket for cfg. It does not contact the store: a missing
// bucket or bad credentials show up on the first request.
func New(ctx context.Context, cfg Config) (*Bucket, error) {
	if cfg.Bucket == "" || strings.ContainsAny(cfg.Bucket, "/") {
		return nil, fmt.Errorf("s3: bucket name %q: %w", cfg.Bucket, bucket.ErrInvalid)
	}
	if (cfg.AccessKey == "") != (cfg.SecretKey == "") {
		return nil, fmt.Errorf("s3: access key and secret key must be given together: %w", bucket.ErrInvalid)
	}
	if cfg.Anonymous && cfg.AccessKey != "" {
		return nil, fmt.Errorf("s3: anonymous access with static keys: %w", bucket.ErrInvalid)
	}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			// Do not echo the endpoint: a URL with userinfo may hold a secret.
			return nil, fmt.Errorf("s3: endpoint must be an http(s)://host[:port] URL without credentials: %w", bucket.ErrInvalid)
		}
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	orDefault := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	orDefault(&cfg.DialTimeout, DefaultDialTimeout)
	orDefault(&cfg.ResponseHeaderTimeout, DefaultResponseHeaderTimeout)
	orDefault(&cfg.ReadTimeout, DefaultReadTimeout)

	httpClient := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = cfg.DialTimeout }).
		WithTransportOptions(func(t *http.Transport) {
			// Keep as many idle connections as ferry runs requests in
			// parallel, so readahead does not reconnect per block. No
			// hard cap (MaxConnsPerHost): the budget lives in readahead,
			// and a cap here would block callers holding open readers.
			t.MaxIdleConns = cfg.MaxConnections
			t.MaxIdleConnsPerHost = cfg.MaxConnections
			t.ResponseHeaderTimeout = cfg.ResponseHeaderTimeout
		}).
		// A body that goes silent fails instead of hanging a FUSE read.
		WithReadTimeout(cfg.ReadTimeout)

	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(httpClient),
		// ferry's retry decorator owns retries.
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
		config.WithRetryMaxAttempts(1),
		// Checksums only where the API demands them: S3-compatible stores
		// (versitygw among them) differ in what they return for ranged
		// GETs, and a whole-object checksum cannot validate a range.
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	switch {
	case cfg.Anonymous:
		opts = append(opts, config.WithCredentialsProvider(aws.AnonymousCredentials{}))
	case cfg.AccessKey != "":
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		// The SDK's message names files and profiles, never secrets.
		return nil, fmt.Errorf("s3: loading AWS config: %w: %w", bucket.ErrInvalid, err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = defaultRegion
	}
	client := s3sdk.NewFromConfig(awsCfg, func(o *s3sdk.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		// Do not log a warning per GET that checksum validation was skipped.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Bucket{client: client, bucket: cfg.Bucket, name: "s3://" + cfg.Bucket, log: log}, nil
}

// Name is "s3://bucket".
func (b *Bucket) Name() string { return b.name }

// Stat returns the object's metadata (HeadObject).
func (b *Bucket) Stat(ctx context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
	if req.Name == "" {
		return nil, fmt.Errorf("s3: stat: empty object name: %w", bucket.ErrInvalid)
	}
	return b.head(ctx, "stat", req.Name, "")
}

// head runs HeadObject, pinned to version when it is set.
func (b *Bucket) head(ctx context.Context, op, name, version string) (*bucket.Object, error) {
	in := &s3sdk.HeadObjectInput{Bucket: &b.bucket, Key: aws.String(name)}
	if version != "" {
		in.IfMatch = ifMatch(version)
	}
	out, err := b.client.HeadObject(ctx, in)
	if err != nil {
		return nil, b.translate(ctx, op, name, err)
	}
	size := uint64(max(aws.ToInt64(out.ContentLength), 0))
	obj := &bucket.Object{
		Name:    name,
		Size:    size,
		Version: b.versionOf(name, out.ETag, out.LastModified, size),
		Updated: aws.ToTime(out.LastModified),
	}
	if version != "" && obj.Version != version {
		return nil, b.changed(op, name, version, obj.Version)
	}
	return obj, nil
}

// List returns one page of ListObjectsV2.
func (b *Bucket) List(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	if req.MaxResults < 0 {
		return nil, fmt.Errorf("s3: list: MaxResults %d: %w", req.MaxResults, bucket.ErrInvalid)
	}
	// URL-encoded keys: XML 1.0 cannot carry some characters a key may
	// hold (U+0001, U+FFFF, ...), and S3 would otherwise send them as
	// character references Go's XML decoder rejects, failing the page and
	// with it every valid name on it. Decoded only if the store says it
	// encoded them (some S3-compatible stores ignore the request).
	in := &s3sdk.ListObjectsV2Input{Bucket: &b.bucket, EncodingType: types.EncodingTypeUrl}
	if req.Prefix != "" {
		in.Prefix = aws.String(req.Prefix)
	}
	if req.Delimiter != "" {
		in.Delimiter = aws.String(req.Delimiter)
	}
	if req.ContinuationToken != "" {
		in.ContinuationToken = aws.String(req.ContinuationToken)
	}
	if req.MaxResults > 0 {
		in.MaxKeys = aws.Int32(int32(min(req.MaxResults, 1000)))
	}
	out, err := b.client.ListObjectsV2(ctx, in)
	if err != nil {
		return nil, b.translate(ctx, "list", req.Prefix, err)
	}
	name := func(s *string) (string, error) {
		if out.EncodingType != types.EncodingTypeUrl {
			return aws.ToString(s), nil
		}
		n, err := url.QueryUnescape(aws.ToString(s))
		if err != nil {
			return "", fmt.Errorf("s3: list %s/%s: undecodable name %q in a URL-encoded listing: %w",
				b.name, req.Prefix, aws.ToString(s), bucket.ErrUnavailable)
		}
		return n, nil
	}
	l := &bucket.Listing{}
	for _, o := range out.Contents {
		n, err := name(o.Key)
		if err != nil {
			return nil, err
		}
		size := uint64(max(aws.ToInt64(o.Size), 0))
		l.Objects = append(l.Objects, bucket.Object{
			Name:    n,
			Size:    size,
			Version: b.versionOf(n, o.ETag, o.LastModified, size),
			Updated: aws.ToTime(o.LastModified),
		})
	}
	for _, p := range out.CommonPrefixes {
		n, err := name(p.Prefix)
		if err != nil {
			return nil, err
		}
		l.Prefixes = append(l.Prefixes, n)
	}
	if aws.ToBool(out.IsTruncated) {
		l.ContinuationToken = aws.ToString(out.NextContinuationToken)
		if l.ContinuationToken == "" {
			// A truncated page without a token would make callers
			// either loop forever or silently stop early.
			return nil, fmt.Errorf("s3: list %s/%s: truncated page without continuation token: %w",
				b.name, req.Prefix, bucket.ErrUnavailable)
		}
	}
	return l, nil
}

// NewRangeReader opens a GetObject for req.Range ("bytes=a-b", inclusive
// end) pinned with If-Match to req.Version.
func (b *Bucket) NewRangeReader(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	if req.Name == "" {
		return nil, fmt.Errorf("s3: read: empty object name: %w", bucket.ErrInvalid)
	}
	if req.Range.Limit < req.Range.Start {
		return nil, fmt.Errorf("s3: read %s/%s: range %v: %w", b.name, req.Name, req.Range, bucket.ErrInvalid)
	}
	if req.Range.Len() == 0 {
		// HTTP cannot express an empty range; check existence instead.
		return b.emptyRead(ctx, req)
	}
	in := &s3sdk.GetObjectInput{
		Bucket: &b.bucket,
		Key:    aws.String(req.Name),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", req.Range.Start, req.Range.Limit-1)),
	}
	if req.Version != "" {
		in.IfMatch = ifMatch(req.Version)
	}
	out, err := b.client.GetObject(ctx, in)
	if err != nil {
		if statusCode(err) == http.StatusRequestedRangeNotSatisfiable {
			// The range starts at or past the end: clipped, it is empty.
			return b.emptyRead(ctx, req)
		}
		return nil, b.translate(ctx, "read", req.Name, err)
	}
	// Work out which bytes the body holds.
	bodyStart, total := uint64(0), uint64(max(aws.ToInt64(out.ContentLength), 0))
	if out.ContentRange != nil {
		var first, last uint64
		if _, err := fmt.Sscanf(*out.ContentRange, "bytes %d-%d/%d", &first, &last, &total); err != nil {
			out.Body.Close()
			return nil, fmt.Errorf("s3: read %s/%s: bad Content-Range %q: %w",
				b.name, req.Name, *out.ContentRange, bucket.ErrUnavailable)
		}
		bodyStart = first
	}
	if got := b.versionOf(req.Name, out.ETag, out.LastModified, total); req.Version != "" && got != req.Version {
		// The store ignored the precondition (or the object changed
		// between its check and the body); never hand out the other
		// version.
		out.Body.Close()
		return nil, b.changed("read", req.Name, req.Version, got)
	}
	// Without Content-Range the store ignored Range and sent the whole
	// object: skip to the start.
	want := req.Range.Clip(total)
	if bodyStart > want.Start {
		out.Body.Close()
		return nil, fmt.Errorf("s3: read %s/%s: asked for %v, body starts at %d: %w",
			b.name, req.Name, req.Range, bodyStart, bucket.ErrUnavailable)
	}
	return &rangeReader{
		ctx:       ctx,
		b:         b,
		name:      req.Name,
		body:      out.Body,
		skip:      int64(want.Start - bodyStart),
		remaining: want.Len(),
	}, nil
}

// emptyRead serves a range that holds no bytes: it still checks that the
// object exists at the pinned version.
func (b *Bucket) emptyRead(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	if _, err := b.head(ctx, "read", req.Name, req.Version); err != nil {
		return nil, err
	}
	return http.NoBody, nil
}

// Put uploads data as one object and returns what Stat now says.
func (b *Bucket) Put(ctx context.Context, req *bucket.PutRequest) (*bucket.Object, error) {
	if req.Name == "" {
		return nil, fmt.Errorf("s3: put: empty object name: %w", bucket.ErrInvalid)
	}
	_, err := b.client.PutObject(ctx, &s3sdk.PutObjectInput{
		Bucket:        &b.bucket,
		Key:           aws.String(req.Name),
		Body:          bytes.NewReader(req.Data),
		ContentLength: aws.Int64(int64(len(req.Data))),
	})
	if err != nil {
		return nil, b.translate(ctx, "put", req.Name, err)
	}
	// Stat rather than trusting PutObject's reply: it has no size or
	// modification time, and this way Put returns exactly what Stat will.
	return b.head(ctx, "put", req.Name, "")
}

// Delete removes the object. S3 answers a delete of a missing key with
// success, so existence is checked first (racy, but this is for staging).
func (b *Bucket) Delete(ctx context.Context, name string) error {
	if name == "" {
		return fmt.Errorf("s3: delete: empty object name: %w", bucket.ErrInvalid)
	}
	if _, err := b.head(ctx, "delete", name, ""); err != nil {
		return err
	}
	_, err := b.client.DeleteObject(ctx, &s3sdk.DeleteObjectInput{Bucket: &b.bucket, Key: aws.String(name)})
	return b.translate(ctx, "delete", name, err)
}

// changed is the error for a read pinned to a version the object no
// longer has.
func (b *Bucket) changed(op, name, want, got string) error {
	return fmt.Errorf("s3: %s %s/%s: pinned to version %s, store has %s: %w",
		op, b.name, name, want, got, bucket.ErrPrecondition)
}

// rangeReader yields exactly `remaining` bytes of body after skipping
// `skip`, and turns an early end into io.ErrUnexpectedEOF.
// Not safe for concurrent use (like any io.Reader).
type rangeReader struct {
	// Dependencies
	ctx  context.Context // the request's; classifies read errors
	b    *Bucket
	name string
	body io.ReadCloser

	// Mutable state
	skip      int64  // bytes before the range still to discard
	remaining uint64 // bytes of the range not yet returned
}

func (r *rangeReader) Read(p []byte) (int, error) {
	if r.skip > 0 {
		n, err := io.CopyN(io.Discard, r.body, r.skip)
		r.skip -= n
		if err != nil {
			return 0, r.bodyError(err)
		}
	}
	if r.remaining == 0 {
		return 0, io.EOF
	}
	if uint64(len(p)) > r.remaining {
		p = p[:r.remaining]
	}
	n, err := r.body.Read(p)
	r.remaining -= uint64(n)
	switch {
	case err == nil && r.remaining == 0:
		// With Content-Length, Go's transport has already seen the end
		// and will reuse the connection. Not read further: a chunked
		// terminator (or extra bytes from a store ignoring Range) could
		// keep a finished read waiting; Close drops that connection.
		return n, io.EOF
	case err == nil:
		return n, nil
	case errors.Is(err, io.EOF) && r.remaining == 0:
		return n, io.EOF
	default:
		return n, r.bodyError(err)
	}
}

// bodyError classifies an error met while reading the body.
func (r *rangeReader) bodyError(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return r.b.translate(r.ctx, "read", r.name, err)
}

func (r *rangeReader) Close() error {
	// Closing early aborts the transfer; Go's transport then drops the
	// connection rather than draining an unbounded body.
	return r.body.Close()
}
