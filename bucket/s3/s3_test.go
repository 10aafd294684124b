package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	s3sdk "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/buckettest"
	"ferry/bucket/emulator"
)

// One versitygw per test binary: starting it costs more than all the
// requests of a test; each test gets a fresh bucket on it instead.
var (
	gw         *emulator.S3
	bucketSeq  atomic.Int64
	gwStartErr error
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ferry-s3-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	gw, gwStartErr = emulator.StartS3(context.Background(), dir)
	if gwStartErr == nil {
		defer gw.Stop()
	}
	return m.Run()
}

// emulatorConfig is a Config for bucket name on the shared versitygw.
func emulatorConfig(t *testing.T, name string) Config {
	t.Helper()
	require.NoError(t, gwStartErr, "versitygw did not start")
	return Config{
		Bucket:    name,
		Endpoint:  gw.Endpoint,
		Region:    gw.Region,
		PathStyle: true,
		AccessKey: gw.AccessKey,
		SecretKey: gw.SecretKey,
	}
}

// newTestBucket creates a fresh, empty bucket on the shared versitygw.
func newTestBucket(t *testing.T) *Bucket {
	t.Helper()
	name := fmt.Sprintf("ferry-test-%d", bucketSeq.Add(1))
	cfg := emulatorConfig(t, name)
	require.NoError(t, gw.CreateBucket(t.Context(), name))
	b, err := New(t.Context(), cfg)
	require.NoError(t, err)
	return b
}

func TestConformanceS3(t *testing.T) {
	buckettest.Run(t, func(t *testing.T) (bucket.Bucket, bucket.Writer) {
		b := newTestBucket(t)
		return b, b
	})
}

func TestName(t *testing.T) {
	b, err := New(t.Context(), Config{Bucket: "data", AccessKey: "AKIDSECRETISH", SecretKey: "very-secret"})
	require.NoError(t, err)
	assert.Equal(t, "s3://data", b.Name())
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Bucket: "a/b"},
		{Bucket: "b", AccessKey: "only-access"},
		{Bucket: "b", SecretKey: "only-secret"},
		{Bucket: "b", Anonymous: true, AccessKey: "a", SecretKey: "s"},
	} {
		_, err := New(t.Context(), cfg)
		assert.ErrorIs(t, err, bucket.ErrInvalid, "%+v", cfg)
		if err != nil {
			assert.NotContains(t, err.Error(), "only-secret")
		}
	}
}

// TestMissingBucket: every call on a bucket that does not exist is
// ErrNotFound (NoSuchBucket), List included.
func TestMissingBucket(t *testing.T) {
	b, err := New(t.Context(), emulatorConfig(t, "no-such-bucket-here"))
	require.NoError(t, err)
	ctx := t.Context()
	_, err = b.Stat(ctx, &bucket.StatRequest{Name: "x"})
	assert.ErrorIs(t, err, bucket.ErrNotFound)
	_, err = b.List(ctx, &bucket.ListRequest{})
	assert.ErrorIs(t, err, bucket.ErrNotFound)
	_, err = b.NewRangeReader(ctx, &bucket.ReadRequest{Name: "x", Range: bucket.ByteRange{Start: 0, Limit: 10}})
	assert.ErrorIs(t, err, bucket.ErrNotFound)
}

// TestWrongCredentials: a bad secret is ErrPermission, and the error
// never contains the secret.
func TestWrongCredentials(t *testing.T) {
	good := newTestBucket(t)
	_, err := good.Put(t.Context(), &bucket.PutRequest{Name: "obj", Data: []byte("data")})
	require.NoError(t, err)

	cfg := emulatorConfig(t, good.bucket)
	cfg.SecretKey = "definitely-wrong-secret"
	b, err := New(t.Context(), cfg)
	require.NoError(t, err)
	_, err = b.Stat(t.Context(), &bucket.StatRequest{Name: "obj"})
	require.ErrorIs(t, err, bucket.ErrPermission)
	assert.NotContains(t, err.Error(), cfg.SecretKey)
	_, err = b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "obj", Range: bucket.ByteRange{Limit: 4}})
	require.ErrorIs(t, err, bucket.ErrPermission)
	assert.NotContains(t, err.Error(), cfg.SecretKey)
	_, err = b.List(t.Context(), &bucket.ListRequest{})
	require.ErrorIs(t, err, bucket.ErrPermission)
	assert.False(t, bucket.IsRetryable(err))
}

// TestAnonymousRefused: versitygw without a bucket policy refuses
// unsigned requests; Anonymous must really send them unsigned.
func TestAnonymousRefused(t *testing.T) {
	good := newTestBucket(t)
	cfg := emulatorConfig(t, good.bucket)
	cfg.AccessKey, cfg.SecretKey, cfg.Anonymous = "", "", true
	b, err := New(t.Context(), cfg)
	require.NoError(t, err)
	_, err = b.List(t.Context(), &bucket.ListRequest{})
	assert.ErrorIs(t, err, bucket.ErrPermission)
}

// TestVersityGWHonoursIfMatch records that versitygw evaluates If-Match on
// GET and HEAD (412), so the backend's own ETag comparison is a second
// line of defence there, not the only one.
func TestVersityGWHonoursIfMatch(t *testing.T) {
	b := newTestBucket(t)
	ctx := t.Context()
	_, err := b.Put(ctx, &bucket.PutRequest{Name: "obj", Data: []byte("version one")})
	require.NoError(t, err)

	_, err = b.client.GetObject(ctx, &s3sdk.GetObjectInput{
		Bucket: aws.String(b.bucket), Key: aws.String("obj"),
		Range: aws.String("bytes=0-3"), IfMatch: aws.String(`"0123456789abcdef0123456789abcdef"`),
	})
	assert.Equal(t, 412, statusCode(err), "GET If-Match: %v", err)
	_, err = b.client.HeadObject(ctx, &s3sdk.HeadObjectInput{
		Bucket: aws.String(b.bucket), Key: aws.String("obj"),
		IfMatch: aws.String(`"0123456789abcdef0123456789abcdef"`),
	})
	assert.Equal(t, 412, statusCode(err), "HEAD If-Match: %v", err)
}

// TestPastEndRange: a range starting at or past the end is a 416 from the
// store and an empty read for the caller, still checking the version.
func TestPastEndRange(t *testing.T) {
	b := newTestBucket(t)
	ctx := t.Context()
	o, err := b.Put(ctx, &bucket.PutRequest{Name: "obj", Data: []byte("0123456789")})
	require.NoError(t, err)
	empty, err := b.Put(ctx, &bucket.PutRequest{Name: "empty", Data: nil})
	require.NoError(t, err)

	for _, tc := range []struct {
		name    string
		version string
		r       bucket.ByteRange
		want    string
	}{
		{"obj", o.Version, bucket.ByteRange{Start: 10, Limit: 20}, ""},
		{"obj", o.Version, bucket.ByteRange{Start: 100, Limit: 200}, ""},
		{"obj", o.Version, bucket.ByteRange{Start: 8, Limit: 200}, "89"},
		{"obj", "", bucket.ByteRange{Start: 5, Limit: 5}, ""},
		{"empty", empty.Version, bucket.ByteRange{Start: 0, Limit: 10}, ""},
		{"empty", "", bucket.ByteRange{Start: 0, Limit: 0}, ""},
	} {
		r, err := b.NewRangeReader(ctx, &bucket.ReadRequest{Name: tc.name, Version: tc.version, Range: tc.r})
		require.NoError(t, err, "%s %v", tc.name, tc.r)
		got, err := io.ReadAll(r)
		require.NoError(t, err)
		require.NoError(t, r.Close())
		assert.Equal(t, tc.want, string(got), "%s %v", tc.name, tc.r)
	}

	_, err = b.NewRangeReader(ctx, &bucket.ReadRequest{Name: "obj", Version: "stale", Range: bucket.ByteRange{Start: 50, Limit: 60}})
	assert.ErrorIs(t, err, bucket.ErrPrecondition)
	_, err = b.NewRangeReader(ctx, &bucket.ReadRequest{Name: "gone", Range: bucket.ByteRange{Start: 50, Limit: 60}})
	assert.ErrorIs(t, err, bucket.ErrNotFound)
}

func TestInvalidRequests(t *testing.T) {
	b, err := New(t.Context(), Config{Bucket: "b", Anonymous: true, Endpoint: "http://127.0.0.1:1"})
	require.NoError(t, err)
	ctx := t.Context()
	_, err = b.Stat(ctx, &bucket.StatRequest{})
	assert.ErrorIs(t, err, bucket.ErrInvalid)
	_, err = b.NewRangeReader(ctx, &bucket.ReadRequest{Name: "x", Range: bucket.ByteRange{Start: 5, Limit: 4}})
	assert.ErrorIs(t, err, bucket.ErrInvalid)
	_, err = b.List(ctx, &bucket.ListRequest{MaxResults: -1})
	assert.ErrorIs(t, err, bucket.ErrInvalid)
	err = b.Delete(ctx, "")
	assert.ErrorIs(t, err, bucket.ErrInvalid)
}

func TestDeleteMissing(t *testing.T) {
	b := newTestBucket(t)
	err := b.Delete(t.Context(), "never-there")
	assert.ErrorIs(t, err, bucket.ErrNotFound)
	assert.False(t, errors.Is(err, bucket.ErrUnavailable))
}

// TestTransportSizing: the connection pool follows MaxConnections and the
// timeouts reach the transport (their effect is tested in errors_test.go).
func TestTransportSizing(t *testing.T) {
	for _, tc := range []struct{ max, want int }{{0, DefaultMaxConnections}, {7, 7}, {300, 300}} {
		b, err := New(t.Context(), Config{Bucket: "b", Anonymous: true, MaxConnections: tc.max})
		require.NoError(t, err)
		hc, ok := b.client.Options().HTTPClient.(*awshttp.BuildableClient)
		require.True(t, ok, "HTTP client is %T", b.client.Options().HTTPClient)
		tr := hc.GetTransport()
		assert.Equal(t, tc.want, tr.MaxIdleConnsPerHost)
		assert.Equal(t, tc.want, tr.MaxIdleConns)
		assert.Equal(t, DefaultResponseHeaderTimeout, tr.ResponseHeaderTimeout)
		assert.Equal(t, DefaultDialTimeout, hc.GetDialer().Timeout)
		rt, ok := hc.GetReadTimeout()
		assert.True(t, ok)
		assert.Equal(t, DefaultReadTimeout, rt)
	}
}

// TestVersityGWBehindTheBack records an emulator gap: versitygw keeps
// ETags in xattrs set only by its API, so a file changed directly under
// the posix root keeps its old ETag, and one created directly has none.
// Real S3 has no "behind the back"; tests must stage through Put.
func TestVersityGWBehindTheBack(t *testing.T) {
	b := newTestBucket(t)
	ctx := t.Context()
	o, err := b.Put(ctx, &bucket.PutRequest{Name: "obj", Data: []byte("hello")})
	require.NoError(t, err)
	dir := gw.BucketDir(b.bucket)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "obj"), []byte("changed behind the back"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "raw"), []byte("raw"), 0o644))

	changed, err := b.Stat(ctx, &bucket.StatRequest{Name: "obj"})
	require.NoError(t, err)
	assert.Equal(t, uint64(len("changed behind the back")), changed.Size)
	assert.Equal(t, o.Version, changed.Version, "versitygw now reports a stale ETag; if this fails the gap is fixed")
	raw, err := b.Stat(ctx, &bucket.StatRequest{Name: "raw"})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(raw.Version, weakPrefix),
		"versitygw now gives direct files an ETag (%q); if this fails the gap is fixed", raw.Version)
}

// An object without an ETag gets a weak version (modification time to
// the second, and size), the same from a listing and a Stat; a read
// pinned to it fails with ErrPrecondition once the object is rewritten,
// also with the same size, and never hands out the new bytes.
func TestWeakVersions(t *testing.T) {
	var logs strings.Builder
	cfg := emulatorConfig(t, fmt.Sprintf("ferry-test-%d", bucketSeq.Add(1)))
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	require.NoError(t, gw.CreateBucket(t.Context(), cfg.Bucket))
	b, err := New(t.Context(), cfg)
	require.NoError(t, err)
	ctx := t.Context()
	path := filepath.Join(gw.BucketDir(b.bucket), "raw")
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	require.NoError(t, os.WriteFile(path, []byte("version one"), 0o644))
	require.NoError(t, os.Chtimes(path, past, past))

	obj, err := b.Stat(ctx, &bucket.StatRequest{Name: "raw"})
	require.NoError(t, err)
	assert.Equal(t, weakVersion(past, 11), obj.Version)
	l, err := b.List(ctx, &bucket.ListRequest{})
	require.NoError(t, err)
	require.Len(t, l.Objects, 1)
	assert.Equal(t, obj.Version, l.Objects[0].Version, "a listing and a Stat agree")
	assert.Equal(t, 1, strings.Count(logs.String(), "without an ETag"), "warned once: %s", logs.String())

	read := func(version string) (string, error) {
		rc, err := b.NewRangeReader(ctx, &bucket.ReadRequest{Name: "raw", Version: version, Range: bucket.ByteRange{Limit: 100}})
		if err != nil {
			return "", err
		}
		defer rc.Close()
		data, err := io.ReadAll(rc)
		return string(data), err
	}
	got, err := read(obj.Version)
	require.NoError(t, err)
	assert.Equal(t, "version one", got)

	// Rewritten with the same size, a second later.
	require.NoError(t, os.WriteFile(path, []byte("version two"), 0o644))
	later := past.Add(time.Second)
	require.NoError(t, os.Chtimes(path, later, later))
	_, err = read(obj.Version)
	require.ErrorIs(t, err, bucket.ErrPrecondition, "a same-size rewrite a second later")
	_, err = b.Stat(ctx, &bucket.StatRequest{Name: "raw"})
	require.NoError(t, err)
	_, err = b.head(ctx, "read", "raw", obj.Version)
	require.ErrorIs(t, err, bucket.ErrPrecondition)
	got, err = read(weakVersion(later, 11))
	require.NoError(t, err)
	assert.Equal(t, "version two", got)
}
