package readahead

import (
	"context"
	crand "crypto/rand"
	"io"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/mem"
)

// flipping corrupts the first byte of the next `left` bodies it serves,
// as a bad link or cache tier would.
type flipping struct {
	bucket.Bucket
	left atomic.Int64
}

func (f *flipping) NewRangeReader(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	rc, err := f.Bucket.NewRangeReader(ctx, req)
	if err != nil || f.left.Add(-1) < 0 {
		return rc, err
	}
	return &flipFirst{ReadCloser: rc}, nil
}

type flipFirst struct {
	io.ReadCloser
	done bool
}

func (r *flipFirst) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if n > 0 && !r.done {
		p[0] ^= 0x01
		r.done = true
	}
	return n, err
}

// randomData is n bytes that compress to nothing.
func randomData(t *testing.T, n int) []byte {
	t.Helper()
	p := make([]byte, n)
	_, err := crand.Read(p)
	require.NoError(t, err)
	return p
}

// An object fetched whole is compared with the CRC32C the store gives:
// one corrupted body is fetched again and the reader gets the right
// bytes; a second fails the read with ErrChecksum, and nothing wrong is
// served or cached.
func TestWholeObjectChecksum(t *testing.T) {
	for _, cached := range []bool{false, true} {
		m := mem.New("b")
		want := randomData(t, 300<<10)
		obj, err := m.Put(t.Context(), &bucket.PutRequest{Name: "small", Data: want})
		require.NoError(t, err)
		require.True(t, obj.HasCRC32C)
		b := &flipping{Bucket: m}
		cfg := Config{Bucket: b, MemoryLimit: 64 * MiB}
		var cache *memCache
		if cached {
			cache = newMemCache(64 * KiB)
			cfg.Cache = cache
		}
		f := newTestFetcher(t, cfg)

		b.left.Store(1)
		got := make([]byte, len(want))
		h := f.Open(*obj)
		n, err := h.ReadAt(t.Context(), got, 0)
		require.NoError(t, err, "cached %v: one bad body is fetched again", cached)
		assert.Equal(t, want, got[:n])
		h.Close()
		st := f.Stats()
		assert.Equal(t, int64(1), st.ChecksumMismatches)
		assert.Equal(t, int64(2), st.Requests)

		if cached {
			continue // the cache holds the right bytes now
		}
		b.left.Store(2)
		h = f.Open(*obj)
		_, err = h.ReadAt(t.Context(), got, 0)
		require.ErrorIs(t, err, ErrChecksum, "two bad bodies in a row")
		h.Close()
		assert.Equal(t, int64(3), f.Stats().ChecksumMismatches)
	}
}

// An object fetched whole through a cache, corrupted twice: nothing is
// stored, and the next read, with a good body, serves the right bytes.
func TestWholeObjectChecksumNothingCached(t *testing.T) {
	m := mem.New("b")
	want := randomData(t, 200<<10)
	obj, err := m.Put(t.Context(), &bucket.PutRequest{Name: "small", Data: want})
	require.NoError(t, err)
	b := &flipping{Bucket: m}
	cache := newMemCache(64 * KiB)
	f := newTestFetcher(t, Config{Bucket: b, Cache: cache, MemoryLimit: 64 * MiB})
	b.left.Store(2)
	got := make([]byte, len(want))
	h := f.Open(*obj)
	_, err = h.ReadAt(t.Context(), got, 0)
	require.ErrorIs(t, err, ErrChecksum)
	h.Close()
	assert.Zero(t, cache.CachedBytes(cacheKeyOf(*obj)), "bad bytes were cached")
	h = f.Open(*obj)
	n, err := h.ReadAt(t.Context(), got, 0)
	require.NoError(t, err)
	assert.Equal(t, want, got[:n])
	h.Close()
}
