package mem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/buckettest"
)

func TestConformanceMem(t *testing.T) {
	buckettest.Run(t, func(t *testing.T) (bucket.Bucket, bucket.Writer) {
		b := New(t.Name())
		t.Cleanup(b.checkInvariants)
		return b, b
	})
}

func newWith(t *testing.T, objs map[string]string) *Bucket {
	t.Helper()
	b := New("test")
	for n, d := range objs {
		_, err := b.Put(t.Context(), &bucket.PutRequest{Name: n, Data: []byte(d)})
		require.NoError(t, err)
	}
	b.ResetStats()
	return b
}

func readAll(ctx context.Context, b *Bucket, req *bucket.ReadRequest) ([]byte, error) {
	r, err := b.NewRangeReader(ctx, req)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func TestStats(t *testing.T) {
	b := newWith(t, map[string]string{"a": "hello", "b": "world"})
	ctx := t.Context()
	_, err := b.Stat(ctx, &bucket.StatRequest{Name: "a"})
	require.NoError(t, err)
	_, err = b.Stat(ctx, &bucket.StatRequest{Name: "missing"})
	require.ErrorIs(t, err, bucket.ErrNotFound)
	_, err = b.List(ctx, &bucket.ListRequest{})
	require.NoError(t, err)
	got, err := readAll(ctx, b, &bucket.ReadRequest{Name: "a", Range: bucket.ByteRange{Start: 1, Limit: 4}})
	require.NoError(t, err)
	assert.Equal(t, "ell", string(got))
	assert.Equal(t, Stats{Stats: 2, Lists: 1, Reads: 1, BytesRead: 3}, b.Stats())
	b.ResetStats()
	assert.Equal(t, Stats{}, b.Stats())
}

func TestStatsConcurrent(t *testing.T) {
	b := newWith(t, map[string]string{"a": "0123456789"})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				got, err := readAll(t.Context(), b, &bucket.ReadRequest{Name: "a", Range: bucket.ByteRange{Limit: 10}})
				assert.NoError(t, err)
				assert.Equal(t, "0123456789", string(got))
				_, err = b.Stat(t.Context(), &bucket.StatRequest{Name: "a"})
				assert.NoError(t, err)
			}
		})
	}
	// Writers race with readers: readers see one whole version or another.
	wg.Go(func() {
		for i := range 50 {
			_, err := b.Put(t.Context(), &bucket.PutRequest{Name: fmt.Sprintf("w%d", i), Data: []byte("x")})
			assert.NoError(t, err)
		}
	})
	wg.Wait()
	s := b.Stats()
	assert.Equal(t, int64(400), s.Reads)
	assert.Equal(t, int64(400), s.Stats)
	assert.Equal(t, int64(4000), s.BytesRead)
	assert.Equal(t, int64(50), s.Puts)
	b.checkInvariants()
}

var errReset = ErrInjectedReset

func TestFaultsAtCall(t *testing.T) {
	b := newWith(t, map[string]string{"a": "hello"})
	calls := 0
	b.SetFaults(Faults{
		Stat: func(ctx context.Context, req *bucket.StatRequest) error {
			calls++
			return bucket.WithRetryAfter(bucket.ErrUnavailable, time.Second)
		},
		List: func(ctx context.Context, req *bucket.ListRequest) error { return bucket.ErrPermission },
		Read: func(ctx context.Context, req *bucket.ReadRequest) error {
			if req.Name == "a" {
				return bucket.ErrUnavailable
			}
			return nil
		},
	})
	_, err := b.Stat(t.Context(), &bucket.StatRequest{Name: "a"})
	require.ErrorIs(t, err, bucket.ErrUnavailable)
	after, ok := bucket.RetryAfter(err)
	require.True(t, ok)
	assert.Equal(t, time.Second, after)
	assert.Equal(t, 1, calls)
	_, err = b.List(t.Context(), &bucket.ListRequest{})
	require.ErrorIs(t, err, bucket.ErrPermission)
	_, err = b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "a", Range: bucket.ByteRange{Limit: 5}})
	require.ErrorIs(t, err, bucket.ErrUnavailable)
	assert.Equal(t, Stats{Stats: 1, Lists: 1, Reads: 1}, b.Stats(), "failed requests are counted")

	b.SetFaults(Faults{})
	got, err := readAll(t.Context(), b, &bucket.ReadRequest{Name: "a", Range: bucket.ByteRange{Limit: 5}})
	require.NoError(t, err)
	assert.Equal(t, "hello", string(got))
}

func TestFaultReadBodyResetMidBody(t *testing.T) {
	b := newWith(t, map[string]string{"a": "0123456789"})
	b.SetFaults(Faults{ReadBody: func(req *bucket.ReadRequest) (int64, error) { return 4, errReset }})
	r, err := b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "a", Range: bucket.ByteRange{Start: 2, Limit: 10}})
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	require.ErrorIs(t, err, bucket.ErrUnavailable)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.True(t, bucket.IsRetryable(err))
	assert.Equal(t, "2345", string(got))
	require.NoError(t, r.Close())
	assert.Equal(t, int64(4), b.Stats().BytesRead)

	// A fault past the end of the range never fires.
	b.SetFaults(Faults{ReadBody: func(req *bucket.ReadRequest) (int64, error) { return 100, errReset }})
	got, err = readAll(t.Context(), b, &bucket.ReadRequest{Name: "a", Range: bucket.ByteRange{Limit: 10}})
	require.NoError(t, err)
	assert.Equal(t, "0123456789", string(got))
}

func TestFaultReadChunkLatencyHonoursCancel(t *testing.T) {
	b := newWith(t, map[string]string{"a": "0123456789"})
	b.SetFaults(Faults{ReadChunk: func(ctx context.Context, req *bucket.ReadRequest, off int64) error {
		if off == 0 {
			return nil
		}
		<-ctx.Done() // a stalled connection
		return ctx.Err()
	}})
	ctx, cancel := context.WithCancel(t.Context())
	r, err := b.NewRangeReader(ctx, &bucket.ReadRequest{Name: "a", Range: bucket.ByteRange{Limit: 10}})
	require.NoError(t, err)
	buf := make([]byte, 3)
	n, err := r.Read(buf)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	_, err = r.Read(buf)
	require.ErrorIs(t, err, bucket.ErrCanceled)
	assert.False(t, bucket.IsRetryable(err))
}

func TestReaderKeepsOpenedVersion(t *testing.T) {
	b := newWith(t, map[string]string{"a": "old!"})
	r, err := b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "a", Range: bucket.ByteRange{Limit: 4}})
	require.NoError(t, err)
	_, err = b.Put(t.Context(), &bucket.PutRequest{Name: "a", Data: []byte("new!")})
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, "old!", string(got), "an open reader streams the version it opened")
}

func TestVersionsNeverRepeat(t *testing.T) {
	b := New("v")
	o1, err := b.Put(t.Context(), &bucket.PutRequest{Name: "a", Data: []byte("x")})
	require.NoError(t, err)
	require.NoError(t, b.Delete(t.Context(), "a"))
	o2, err := b.Put(t.Context(), &bucket.PutRequest{Name: "a", Data: []byte("x")})
	require.NoError(t, err)
	assert.NotEqual(t, o1.Version, o2.Version)
}

func TestPutRejectsBadNames(t *testing.T) {
	b := New("v")
	for _, n := range []string{"", string(make([]byte, 1025)), "bad\xffutf8"} {
		_, err := b.Put(t.Context(), &bucket.PutRequest{Name: n})
		assert.ErrorIs(t, err, bucket.ErrInvalid, "%q", n)
	}
	b.checkInvariants()
}

func TestListTokens(t *testing.T) {
	// Token after a marker object equal to the prefix must not skip the
	// names under it; token after a common prefix must skip them.
	b := newWith(t, map[string]string{"d/": "", "d/a": "1", "d/b/x": "2", "d/b/y": "3", "d/c": "4"})
	var all []string
	req := bucket.ListRequest{Prefix: "d/", Delimiter: "/", MaxResults: 1}
	for {
		l, err := b.List(t.Context(), &req)
		require.NoError(t, err)
		require.LessOrEqual(t, len(l.Objects)+len(l.Prefixes), 1)
		for _, o := range l.Objects {
			all = append(all, o.Name)
		}
		all = append(all, l.Prefixes...)
		if l.ContinuationToken == "" {
			break
		}
		req.ContinuationToken = l.ContinuationToken
	}
	assert.Equal(t, []string{"d/", "d/a", "d/b/", "d/c"}, all)

	_, err := b.List(t.Context(), &bucket.ListRequest{Prefix: "d/", ContinuationToken: "e"})
	assert.ErrorIs(t, err, bucket.ErrInvalid)
	_, err = b.List(t.Context(), &bucket.ListRequest{MaxResults: -1})
	assert.ErrorIs(t, err, bucket.ErrInvalid)
}

func TestClosedReader(t *testing.T) {
	b := newWith(t, map[string]string{"a": "x"})
	r, err := b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "a", Range: bucket.ByteRange{Limit: 1}})
	require.NoError(t, err)
	require.NoError(t, r.Close())
	_, err = r.Read(make([]byte, 1))
	assert.True(t, errors.Is(err, bucket.ErrInvalid))
}
