package connect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/emulator"
	"ferry/bucket/file"
	"ferry/bucket/gcs"
	"ferry/bucket/retry"
	"ferry/bucket/s3"
)

// fastRetry keeps tests against dead endpoints short.
var fastRetry = retry.Config{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}

func TestOpenRejectsOptionsForOtherSchemes(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		url  string
		opts Options
		want string
	}{
		{"file://" + dir, Options{Endpoint: "http://127.0.0.1:1"}, "endpoint"},
		{"file://" + dir, Options{Anonymous: true}, "anonymous"},
		{"file://" + dir, Options{MaxConnections: 4}, "max-connections"},
		{"gs://data", Options{Region: "eu-west-1"}, "region"},
		{"gs://data", Options{S3PathStyle: true}, "s3-path-style"},
		{"gs://data", Options{AccessKey: "a", SecretKey: "b"}, "access/secret key"},
		{"s3://data", Options{KeyFile: "/k.json"}, "key-file"},
		{"s3://data", Options{BillingProject: "p"}, "billing-project"},
		{"s3://data", Options{MaxConnections: -1}, "negative"},
		{"gs://data", Options{Timeout: -time.Second}, "negative"},
		{"s3://data", Options{Endpoint: "127.0.0.1:9000"}, "http://"},
		{"gs://data", Options{Endpoint: "ftp://host"}, "http://"},
		{"gs://data", Options{Endpoint: "http://user:pw@host"}, "without credentials"},
		{"gs://Data", Options{}, "lowercase"},
	} {
		_, err := Open(context.Background(), tc.url, tc.opts)
		if assert.ErrorIs(t, err, bucket.ErrInvalid, "%s %+v", tc.url, tc.opts) {
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), ":pw@")
		}
	}
}

func TestOpenFile(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a"), []byte("hello"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d", "b"), []byte("world"), 0o644))

	reg := prometheus.NewRegistry()
	st, err := Open(context.Background(), "file://"+dir, Options{Registerer: reg})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, st.Close()) })
	require.IsType(t, &file.Bucket{}, st.Backend)
	assert.Equal(t, Location{Scheme: SchemeFile, Dir: dir}, st.Location)
	require.NoError(t, Probe(context.Background(), st))

	ctx := context.Background()
	l, err := st.List(ctx, &bucket.ListRequest{Delimiter: "/"})
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, objectNames(l))
	assert.Equal(t, []string{"d/"}, l.Prefixes)
	obj, err := st.Stat(ctx, &bucket.StatRequest{Name: "d/b"})
	require.NoError(t, err)
	assert.Equal(t, uint64(5), obj.Size)
	assert.Equal(t, "orl", read(t, st, obj, 1, 4))
	_, err = st.Stat(ctx, &bucket.StatRequest{Name: "missing"})
	assert.ErrorIs(t, err, bucket.ErrNotFound)

	s := st.Metrics.Snapshot()
	assert.Equal(t, uint64(2), s.Lists, "probe + list")
	assert.Equal(t, uint64(2), s.Stats)
	assert.Equal(t, uint64(1), s.Reads)
	assert.Equal(t, uint64(3), s.ReadBytes)
	assert.Equal(t, uint64(1), s.Errors)
}

func TestOpenFileMissingDir(t *testing.T) {
	_, err := Open(context.Background(), "file://"+filepath.Join(t.TempDir(), "nope"), Options{})
	require.Error(t, err)
}

// stageAndCheck writes objects inside and outside the mounted prefix
// through the bare backend and checks that the stack shows only the inside
// ones, with the prefix stripped, and counts what it did.
func stageAndCheck(t *testing.T, st *Stack) {
	t.Helper()
	ctx := context.Background()
	w, ok := st.Backend.(bucket.Writer)
	require.True(t, ok, "%T is a bucket.Writer", st.Backend)
	for name, data := range map[string]string{
		"train/a":   "0123456789",
		"train/d/b": "bee",
		"trainer":   "outside",
		"other/c":   "outside",
	} {
		_, err := w.Put(ctx, &bucket.PutRequest{Name: name, Data: []byte(data)})
		require.NoError(t, err, name)
	}

	l, err := st.List(ctx, &bucket.ListRequest{Delimiter: "/"})
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, objectNames(l))
	assert.Equal(t, []string{"d/"}, l.Prefixes)

	obj, err := st.Stat(ctx, &bucket.StatRequest{Name: "a"})
	require.NoError(t, err)
	assert.Equal(t, "a", obj.Name)
	assert.Equal(t, "2345", read(t, st, obj, 2, 6))
	_, err = st.Stat(ctx, &bucket.StatRequest{Name: "c"})
	assert.ErrorIs(t, err, bucket.ErrNotFound)

	s := st.Metrics.Snapshot()
	assert.Equal(t, uint64(2), s.Lists, "probe + list")
	assert.Equal(t, uint64(2), s.Stats)
	assert.Equal(t, uint64(1), s.Reads)
	assert.Equal(t, uint64(4), s.ReadBytes)
	assert.Equal(t, uint64(1), s.Errors)
	assert.Equal(t, uint64(0), s.Retries)
}

func TestOpenGCSEmulator(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fake-gcs-server")
	}
	g := emulator.NewGCSForTest(t)
	ctx := context.Background()
	require.NoError(t, g.CreateBucket(ctx, "ferry-data"))

	st, err := Open(ctx, "gs://ferry-data/train", Options{Endpoint: g.Endpoint, Anonymous: true, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, st.Close()) })
	require.IsType(t, &gcs.Bucket{}, st.Backend)
	assert.Equal(t, "gs://ferry-data/train", st.Name())
	require.NoError(t, Probe(ctx, st))
	stageAndCheck(t, st)

	missing, err := Open(ctx, "gs://no-such-bucket", Options{Endpoint: g.Endpoint, Anonymous: true, Retry: fastRetry})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, missing.Close()) })
	assert.ErrorIs(t, Probe(ctx, missing), bucket.ErrNotFound)
}

func TestOpenS3Emulator(t *testing.T) {
	if testing.Short() {
		t.Skip("starts versitygw")
	}
	e := emulator.NewS3ForTest(t)
	ctx := context.Background()
	require.NoError(t, e.CreateBucket(ctx, "ferry-data"))
	opts := Options{
		Endpoint: e.Endpoint, S3PathStyle: true, Region: e.Region,
		AccessKey: e.AccessKey, SecretKey: e.SecretKey,
		Registerer: prometheus.NewRegistry(),
	}
	st, err := Open(ctx, "s3://ferry-data/train/", opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, st.Close()) })
	require.IsType(t, &s3.Bucket{}, st.Backend)
	assert.Equal(t, "s3://ferry-data/train", st.Name())
	require.NoError(t, Probe(ctx, st))
	stageAndCheck(t, st)

	opts.Registerer = nil
	opts.Retry = fastRetry
	missing, err := Open(ctx, "s3://no-such-bucket", opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, missing.Close()) })
	assert.ErrorIs(t, Probe(ctx, missing), bucket.ErrNotFound)
}

// deadEndpoints returns, per scheme, options pointing at a port nobody
// listens on, and at one that accepts connections but never answers.
func deadEndpoints(t *testing.T) (refused, silent string) {
	port, err := emulator.FreePort()
	require.NoError(t, err)
	refused = fmt.Sprintf("http://127.0.0.1:%d", port)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return refused, "http://" + ln.Addr().String()
}

func TestProbeDeadEndpoints(t *testing.T) {
	refused, silent := deadEndpoints(t)
	for _, scheme := range []string{"gs", "s3"} {
		for _, ep := range []struct{ name, url string }{{"refused", refused}, {"silent", silent}} {
			t.Run(scheme+"/"+ep.name, func(t *testing.T) {
				var userRetries atomic.Int32
				opts := Options{Endpoint: ep.url, Anonymous: true, Retry: fastRetry}
				opts.Retry.OnRetry = func(string, error) { userRetries.Add(1) }
				if scheme == "s3" {
					opts.S3PathStyle = true
					opts.Region = "us-east-1"
				}
				st, err := Open(context.Background(), scheme+"://data", opts)
				require.NoError(t, err)
				t.Cleanup(func() { assert.NoError(t, st.Close()) })

				// The caller's deadline bounds the probe even when the
				// endpoint swallows the request.
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				err = Probe(ctx, st)
				require.ErrorIs(t, err, bucket.ErrUnavailable)
				assert.NotErrorIs(t, err, bucket.ErrCanceled, "our own timeout is the store's fault, not a cancellation")

				s := st.Metrics.Snapshot()
				assert.Equal(t, uint64(1), s.Lists)
				assert.Equal(t, uint64(1), s.Errors)
				assert.Equal(t, uint64(userRetries.Load()), s.Retries, "retries below metrics are counted, and the caller's OnRetry still runs")
				if ep.name == "refused" {
					assert.Equal(t, uint64(2), s.Retries, "3 attempts")
				}
			})
		}
	}
}

// blocking answers List only when ctx ends, like a store that hangs.
type blocking struct{ err error }

func (b *blocking) Name() string { return "fake://blocking" }
func (b *blocking) Stat(context.Context, *bucket.StatRequest) (*bucket.Object, error) {
	return nil, errors.New("unused")
}
func (b *blocking) NewRangeReader(context.Context, *bucket.ReadRequest) (io.ReadCloser, error) {
	return nil, errors.New("unused")
}
func (b *blocking) List(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	if req.MaxResults != 1 || req.Delimiter != "/" || req.Prefix != "" {
		return nil, fmt.Errorf("probe should be a one-entry root listing, got %+v", req)
	}
	if b.err != nil {
		return nil, b.err
	}
	<-ctx.Done()
	return nil, bucket.ContextError(ctx, fmt.Errorf("%w: request aborted", bucket.ErrUnavailable))
}

func TestProbe(t *testing.T) {
	t.Run("store error passes through", func(t *testing.T) {
		err := Probe(context.Background(), &blocking{err: fmt.Errorf("403: %w", bucket.ErrPermission)})
		require.ErrorIs(t, err, bucket.ErrPermission)
		assert.Contains(t, err.Error(), "fake://blocking")
	})
	t.Run("timeout is unavailable", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		err := Probe(ctx, &blocking{})
		require.ErrorIs(t, err, bucket.ErrUnavailable)
		assert.NotErrorIs(t, err, bucket.ErrCanceled)
		assert.Contains(t, err.Error(), "did not answer")
	})
	t.Run("refused until the timeout says so", func(t *testing.T) {
		// As a store at a port nobody listens on: every attempt refused
		// at once, retried until the probe's time is up.
		refused := &blocking{err: fmt.Errorf("%w: dial tcp 127.0.0.1:1: %w", bucket.ErrUnavailable, syscall.ECONNREFUSED)}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		err := Probe(ctx, retry.New(refused, retry.Config{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}))
		require.ErrorIs(t, err, bucket.ErrUnavailable)
		assert.NotErrorIs(t, err, bucket.ErrCanceled)
		assert.Contains(t, err.Error(), "refused the connection for")
		assert.Contains(t, err.Error(), "127.0.0.1:1")
		assert.NotContains(t, err.Error(), "did not answer")
	})
	t.Run("caller cancel is canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(10*time.Millisecond, cancel)
		err := Probe(ctx, &blocking{})
		require.ErrorIs(t, err, bucket.ErrCanceled)
	})
}

func read(t *testing.T, b bucket.Bucket, obj *bucket.Object, start, limit uint64) string {
	t.Helper()
	rc, err := b.NewRangeReader(context.Background(), &bucket.ReadRequest{
		Name: obj.Name, Version: obj.Version, Range: bucket.ByteRange{Start: start, Limit: limit},
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, rc.Close()) }()
	data, err := io.ReadAll(rc)
	require.NoError(t, err)
	return string(data)
}

func objectNames(l *bucket.Listing) []string {
	var names []string
	for _, o := range l.Objects {
		names = append(names, o.Name)
	}
	return names
}
