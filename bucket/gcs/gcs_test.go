package gcs

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/buckettest"
	"ferry/bucket/emulator"
)

// One fake-gcs-server per test binary, started on first use and stopped
// by TestMain; every test gets its own fresh bucket on it. In memory: its
// filesystem backend cannot hold directory markers, which the suite needs.
var (
	emuOnce sync.Once
	emu     *emulator.GCS
	emuErr  error
	emuDir  string
	bucketN atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	if emu != nil {
		_ = emu.Stop()
	}
	if emuDir != "" {
		_ = os.RemoveAll(emuDir)
	}
	os.Exit(code)
}

func emulatorForTest(t *testing.T) *emulator.GCS {
	t.Helper()
	emuOnce.Do(func() {
		emuDir, emuErr = os.MkdirTemp("", "ferry-gcs-test-")
		if emuErr == nil {
			emu, emuErr = emulator.StartGCSInMemory(context.Background(), emuDir)
		}
	})
	require.NoError(t, emuErr, "starting fake-gcs-server")
	return emu
}

// newTestBucket creates a fresh bucket on the emulator and opens it.
func newTestBucket(t *testing.T) *Bucket {
	t.Helper()
	e := emulatorForTest(t)
	name := fmt.Sprintf("ferry-test-%d", bucketN.Add(1))
	require.NoError(t, e.CreateBucket(t.Context(), name))
	b, err := New(t.Context(), Config{Bucket: name, Endpoint: e.Endpoint, Anonymous: true, MaxConnections: 8})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestConformanceGCS(t *testing.T) {
	buckettest.Run(t, func(t *testing.T) (bucket.Bucket, bucket.Writer) {
		b := newTestBucket(t)
		return b, b
	})
}

func TestEndpointForms(t *testing.T) {
	e := emulatorForTest(t)
	name := fmt.Sprintf("ferry-test-%d", bucketN.Add(1))
	require.NoError(t, e.CreateBucket(t.Context(), name))
	for _, ep := range []string{e.Endpoint, e.Endpoint + "/", e.Endpoint + "/storage/v1", e.Endpoint + "/storage/v1/"} {
		t.Run(ep, func(t *testing.T) {
			b, err := New(t.Context(), Config{Bucket: name, Endpoint: ep, Anonymous: true})
			require.NoError(t, err)
			defer b.Close()
			obj := filepath.Base(t.Name())
			data := []byte("endpoint " + ep)
			_, err = b.Put(t.Context(), &bucket.PutRequest{Name: obj, Data: data})
			require.NoError(t, err)
			// A ranged read goes through the XML API on the same host.
			r, err := b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: obj, Range: bucket.ByteRange{Start: 1, Limit: 5}})
			require.NoError(t, err)
			got, err := io.ReadAll(r)
			r.Close()
			require.NoError(t, err)
			assert.Equal(t, data[1:5], got)
		})
	}
}

func TestJSONEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"":                                 DefaultEndpoint,
		"http://127.0.0.1:4443":            "http://127.0.0.1:4443/storage/v1/",
		"http://127.0.0.1:4443/":           "http://127.0.0.1:4443/storage/v1/",
		"http://127.0.0.1:4443/storage/v1": "http://127.0.0.1:4443/storage/v1/",
		"https://storage.googleapis.com/storage/v1/": "https://storage.googleapis.com/storage/v1/",
	} {
		got, err := jsonEndpoint(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"127.0.0.1:4443", "ftp://h", "http://", "http://h/other", "http://h/storage/v1/b", "http://h?x=1"} {
		_, err := jsonEndpoint(bad)
		assert.ErrorIs(t, err, bucket.ErrInvalid, bad)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no bucket":         {Anonymous: true},
		"slash in bucket":   {Bucket: "a/b", Anonymous: true},
		"bad endpoint":      {Bucket: "b", Endpoint: "localhost:1", Anonymous: true},
		"anonymous and key": {Bucket: "b", Anonymous: true, KeyFile: "/x.json"},
	} {
		_, err := New(t.Context(), cfg)
		assert.ErrorIs(t, err, bucket.ErrInvalid, name)
	}
	// A key file that does not exist fails at New, not at the first read.
	_, err := New(t.Context(), Config{Bucket: "b", KeyFile: filepath.Join(t.TempDir(), "missing.json"), Endpoint: "http://127.0.0.1:1"})
	assert.Error(t, err)
}

func TestName(t *testing.T) {
	b, err := New(t.Context(), Config{Bucket: "training-data", Anonymous: true})
	require.NoError(t, err)
	defer b.Close()
	assert.Equal(t, "gs://training-data", b.Name())
}

func TestStatVersionAndCRC(t *testing.T) {
	b := newTestBucket(t)
	data := []byte("the quick brown fox")
	put, err := b.Put(t.Context(), &bucket.PutRequest{Name: "crc", Data: data})
	require.NoError(t, err)
	st, err := b.Stat(t.Context(), &bucket.StatRequest{Name: "crc"})
	require.NoError(t, err)
	assert.Equal(t, put.Version, st.Version, "Put returns what Stat returns")
	assert.True(t, st.HasCRC32C)
	assert.Equal(t, crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)), st.CRC32C)
	assert.Equal(t, uint64(len(data)), st.Size)
	assert.False(t, st.Updated.IsZero())
	_, err = fmt.Sscan(st.Version, new(int64))
	assert.NoError(t, err, "version is the decimal generation")
}

// TestListPrefixesAroundObjects pages with prefixes sorting before,
// between and after the objects: fake-gcs-server repeats prefixes at or
// after the page token on every page and does not count them against
// maxResults, which List must hide.
func TestListPrefixesAroundObjects(t *testing.T) {
	b := newTestBucket(t)
	names := []string{"a", "b/1", "c", "d/1", "d/2", "e", "f", "z/1"}
	for _, n := range names {
		_, err := b.Put(t.Context(), &bucket.PutRequest{Name: n, Data: []byte(n)})
		require.NoError(t, err)
	}
	for max := 0; max <= 4; max++ {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			var objs, prefixes []string
			req := bucket.ListRequest{Delimiter: "/", MaxResults: max}
			for pages := 0; ; pages++ {
				require.Less(t, pages, 20)
				l, err := b.List(t.Context(), &req)
				require.NoError(t, err)
				if max > 0 {
					require.LessOrEqual(t, len(l.Objects)+len(l.Prefixes), max)
				}
				for _, o := range l.Objects {
					objs = append(objs, o.Name)
				}
				prefixes = append(prefixes, l.Prefixes...)
				if l.ContinuationToken == "" {
					break
				}
				req.ContinuationToken = l.ContinuationToken
			}
			assert.Equal(t, []string{"a", "c", "e", "f"}, objs)
			assert.Equal(t, []string{"b/", "d/", "z/"}, prefixes)
		})
	}
	_, err := b.List(t.Context(), &bucket.ListRequest{ContinuationToken: tokenMark + "!!"})
	assert.ErrorIs(t, err, bucket.ErrInvalid)
}

func TestMissingBucket(t *testing.T) {
	e := emulatorForTest(t)
	b, err := New(t.Context(), Config{Bucket: "no-such-bucket", Endpoint: e.Endpoint, Anonymous: true})
	require.NoError(t, err)
	defer b.Close()
	_, err = b.Stat(t.Context(), &bucket.StatRequest{Name: "x"})
	assert.ErrorIs(t, err, bucket.ErrNotFound)
	_, err = b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "x", Range: bucket.ByteRange{Limit: 1}})
	assert.ErrorIs(t, err, bucket.ErrNotFound)
}

func TestReadRejectsBadVersion(t *testing.T) {
	b := newTestBucket(t)
	for _, v := range []string{"abc", "0", "-3", "1.5"} {
		_, err := b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "x", Version: v, Range: bucket.ByteRange{Limit: 1}})
		assert.ErrorIs(t, err, bucket.ErrInvalid, v)
	}
	_, err := b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "x", Range: bucket.ByteRange{Start: 2, Limit: 1}})
	assert.ErrorIs(t, err, bucket.ErrInvalid)
}

// TestGzipEncodedObjectReadsStoredBytes: an object uploaded with
// Content-Encoding: gzip is read as stored, so ranges agree with Stat's
// size instead of GCS transcoding it and ignoring the range.
func TestGzipEncodedObjectReadsStoredBytes(t *testing.T) {
	b := newTestBucket(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write(bytes.Repeat([]byte("ferry "), 1000))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	w := b.bkt.Object("gz").NewWriter(t.Context())
	w.ContentEncoding = "gzip"
	_, err = w.Write(gz.Bytes())
	require.NoError(t, err)
	require.NoError(t, w.Close())

	st, err := b.Stat(t.Context(), &bucket.StatRequest{Name: "gz"})
	require.NoError(t, err)
	require.Equal(t, uint64(gz.Len()), st.Size)
	for _, rg := range []bucket.ByteRange{{Start: 0, Limit: st.Size}, {Start: 3, Limit: 20}} {
		r, err := b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "gz", Version: st.Version, Range: rg})
		require.NoError(t, err)
		got, err := io.ReadAll(r)
		r.Close()
		require.NoError(t, err)
		assert.Equal(t, gz.Bytes()[rg.Start:rg.Limit], got, "%v", rg)
	}
}
