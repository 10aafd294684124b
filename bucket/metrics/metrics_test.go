package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

// fake answers through function fields; nil fields succeed trivially.
type fake struct {
	stat func(name string) (*bucket.Object, error)
	list func(prefix string) (*bucket.Listing, error)
	read func(req *bucket.ReadRequest) (io.ReadCloser, error)
}

var _ bucket.Bucket = (*fake)(nil)

func (f *fake) Name() string { return "fake://b" }

func (f *fake) Stat(_ context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
	if f.stat == nil {
		return &bucket.Object{Name: req.Name}, nil
	}
	return f.stat(req.Name)
}

func (f *fake) List(_ context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	if f.list == nil {
		return &bucket.Listing{}, nil
	}
	return f.list(req.Prefix)
}

func (f *fake) NewRangeReader(_ context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	if f.read == nil {
		return io.NopCloser(strings.NewReader("")), nil
	}
	return f.read(req)
}

// failingBody yields data and then err (instead of io.EOF).
type failingBody struct {
	r   io.Reader
	err error
}

func (b *failingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, b.err
	}
	return n, err
}

func (b *failingBody) Close() error { return nil }

func readAll(t *testing.T, b bucket.Bucket, name string) (string, error) {
	t.Helper()
	rc, err := b.NewRangeReader(context.Background(), &bucket.ReadRequest{Name: name, Range: bucket.ByteRange{Start: 0, Limit: 1 << 20}})
	if err != nil {
		return "", err
	}
	defer func() { require.NoError(t, rc.Close()) }()
	data, err := io.ReadAll(rc)
	return string(data), err
}

func TestKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", bucket.ErrNotFound), KindNotFound},
		{bucket.ErrPrecondition, KindPrecondition},
		{bucket.ErrPermission, KindPermission},
		{fmt.Errorf("503: %w", bucket.ErrUnavailable), KindUnavailable},
		{bucket.ErrInvalid, KindInvalid},
		{bucket.ErrCanceled, KindCanceled},
		{errors.Join(bucket.ErrCanceled, bucket.ErrUnavailable), KindCanceled},
		{errors.New("mystery"), KindOther},
	} {
		assert.Equal(t, tc.want, Kind(tc.err), "%v", tc.err)
	}
}

func TestCountsRequestsErrorsAndBytes(t *testing.T) {
	notFound := fmt.Errorf("%q: %w", "missing", bucket.ErrNotFound)
	reset := fmt.Errorf("%w: connection reset", bucket.ErrUnavailable)
	f := &fake{
		stat: func(name string) (*bucket.Object, error) {
			if name == "missing" {
				return nil, notFound
			}
			return &bucket.Object{Name: name, Size: 3}, nil
		},
		list: func(prefix string) (*bucket.Listing, error) {
			if prefix == "denied/" {
				return nil, bucket.ErrPermission
			}
			return &bucket.Listing{Prefixes: []string{prefix + "x/"}}, nil
		},
		read: func(req *bucket.ReadRequest) (io.ReadCloser, error) {
			switch req.Name {
			case "missing":
				return nil, notFound
			case "broken":
				return &failingBody{r: strings.NewReader("abcd"), err: reset}, nil
			}
			return io.NopCloser(strings.NewReader("hello world")), nil
		},
	}
	reg := prometheus.NewRegistry()
	m := New(f, reg)
	ctx := context.Background()

	obj, err := m.Stat(ctx, &bucket.StatRequest{Name: "a"})
	require.NoError(t, err)
	assert.Equal(t, "a", obj.Name)
	_, err = m.Stat(ctx, &bucket.StatRequest{Name: "missing"})
	assert.Same(t, notFound, err, "errors pass through untouched")
	l, err := m.List(ctx, &bucket.ListRequest{Prefix: "p/"})
	require.NoError(t, err)
	assert.Equal(t, []string{"p/x/"}, l.Prefixes)
	_, err = m.List(ctx, &bucket.ListRequest{Prefix: "denied/"})
	assert.ErrorIs(t, err, bucket.ErrPermission)

	data, err := readAll(t, m, "a")
	require.NoError(t, err)
	assert.Equal(t, "hello world", data)
	_, err = readAll(t, m, "missing")
	assert.ErrorIs(t, err, bucket.ErrNotFound)
	data, err = readAll(t, m, "broken")
	assert.ErrorIs(t, err, bucket.ErrUnavailable)
	assert.Equal(t, "abcd", data)

	assert.Equal(t, Snapshot{Stats: 2, Lists: 2, Reads: 3, ReadBytes: 15, Errors: 4}, m.Snapshot())

	assert.Equal(t, 2.0, testutil.ToFloat64(m.prom.requests.WithLabelValues(OpStat)))
	assert.Equal(t, 2.0, testutil.ToFloat64(m.prom.requests.WithLabelValues(OpList)))
	assert.Equal(t, 3.0, testutil.ToFloat64(m.prom.requests.WithLabelValues(OpRead)))
	assert.Equal(t, 15.0, testutil.ToFloat64(m.prom.readBytes))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.prom.errors.WithLabelValues(OpStat, KindNotFound)))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.prom.errors.WithLabelValues(OpList, KindPermission)))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.prom.errors.WithLabelValues(OpRead, KindNotFound)))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.prom.errors.WithLabelValues(OpRead, KindUnavailable)))

	// The registry exports exactly the agreed names, lint-clean.
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	assert.ElementsMatch(t, []string{
		"ferry_store_requests_total",
		"ferry_store_errors_total",
		"ferry_store_read_bytes_total",
		"ferry_store_request_duration_seconds",
		"ferry_store_retries_total",
	}, names)
	assert.Equal(t, 3, testutil.CollectAndCount(m.prom.duration), "one histogram per op")
}

func TestBodyErrorCountedOncePerReader(t *testing.T) {
	f := &fake{read: func(*bucket.ReadRequest) (io.ReadCloser, error) {
		return &failingBody{r: strings.NewReader(""), err: bucket.ErrUnavailable}, nil
	}}
	m := New(f, nil)
	rc, err := m.NewRangeReader(context.Background(), &bucket.ReadRequest{Name: "a"})
	require.NoError(t, err)
	p := make([]byte, 8)
	for range 3 {
		_, err = rc.Read(p)
		assert.ErrorIs(t, err, bucket.ErrUnavailable)
	}
	require.NoError(t, rc.Close())
	assert.Equal(t, uint64(1), m.Snapshot().Errors)
}

func TestNilRegistererStillCounts(t *testing.T) {
	m := New(&fake{}, nil)
	_, err := m.Stat(context.Background(), &bucket.StatRequest{Name: "a"})
	require.NoError(t, err)
	assert.Equal(t, uint64(1), m.Snapshot().Stats)
	assert.Equal(t, "fake://b", m.Name())
}

func TestTwoBucketsShareOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := New(&fake{}, reg)
	b := New(&fake{}, reg) // must not panic
	ctx := context.Background()
	_, err := a.Stat(ctx, &bucket.StatRequest{Name: "x"})
	require.NoError(t, err)
	_, err = b.Stat(ctx, &bucket.StatRequest{Name: "x"})
	require.NoError(t, err)

	assert.Equal(t, uint64(1), a.Snapshot().Stats, "snapshots are per bucket")
	assert.Equal(t, uint64(1), b.Snapshot().Stats)
	assert.Equal(t, 2.0, testutil.ToFloat64(b.prom.requests.WithLabelValues(OpStat)), "prometheus sees the process total")
}

func TestRecordRetry(t *testing.T) {
	m := New(&fake{}, prometheus.NewRegistry())
	m.RecordRetry(OpRead, bucket.ErrUnavailable)
	m.RecordRetry(OpRead, bucket.ErrUnavailable)
	m.RecordRetry(OpList, bucket.ErrUnavailable)
	assert.Equal(t, uint64(3), m.Snapshot().Retries)
	assert.Equal(t, 2.0, testutil.ToFloat64(m.prom.retries.WithLabelValues(OpRead)))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.prom.retries.WithLabelValues(OpList)))
}

func TestConcurrentCounting(t *testing.T) {
	m := New(&fake{read: func(*bucket.ReadRequest) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader("0123456789")), nil
	}}, prometheus.NewRegistry())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, err := m.Stat(context.Background(), &bucket.StatRequest{Name: "a"})
				assert.NoError(t, err)
				_, err = readAll(t, m, "a")
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, Snapshot{Stats: 800, Reads: 800, ReadBytes: 8000}, m.Snapshot())
	assert.Equal(t, 8000.0, testutil.ToFloat64(m.prom.readBytes))
}
