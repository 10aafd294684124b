package fs

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/metadata"
	"ferry/ranges"
	"ferry/readahead"
)

// testConfig is Config as fs tests build it: the metadata cache's
// settings beside it, and the test Content's parts as function fields
// (nil ones take the defaults below).
type testConfig struct {
	Config
	Bucket                   bucket.Bucket
	MetadataTTL, NegativeTTL time.Duration
	ListPageSize             int
	MetadataLimit            int64 // metadata's MemoryLimit
	// ListAfterMisses is metadata's: 0 lists nothing in the background
	// here (unit tests count store requests exactly).
	ListAfterMisses int
	// Open returns a handle's reader: openDirect(Bucket) in newTestFS
	// and mount; nil reads straight from Bucket too.
	Open func(obj bucket.Object) readahead.Reader
	// OpenAhead opens a file ahead of its reader; nil is Open, not
	// Unread.
	OpenAhead func(obj bucket.Object) readahead.Reader
	// Whole is the disk cache's file of an object held whole; setting it
	// turns Passthrough on.
	Whole func(obj bucket.Object) (readahead.WholeFile, bool)
	// Unready is what stands between an object and passthrough.
	Unready func(obj bucket.Object, limit int64) []ranges.ByteRange
	// CachedBytes is the disk cache's count of obj's bytes; nil: there is
	// no disk cache.
	CachedBytes func(obj bucket.Object) int64
}

// build makes the Config: a metadata cache over Bucket (clock now, nil:
// the real one) and a testContent.
func (tc *testConfig) build(t *testing.T, now func() time.Time) Config {
	t.Helper()
	misses := tc.ListAfterMisses
	if misses == 0 {
		misses = -1
	}
	meta, err := metadata.New(metadata.Config{Bucket: tc.Bucket, TTL: tc.MetadataTTL, NegativeTTL: tc.NegativeTTL,
		PageSize: tc.ListPageSize, ListAfterMisses: misses, MemoryLimit: tc.MetadataLimit, Logger: tc.Logger, Registerer: tc.Registerer, Now: now})
	require.NoError(t, err)
	t.Cleanup(meta.Close)
	cfg := tc.Config
	cfg.Metadata = meta
	cfg.Content = &testContent{tc: tc}
	cfg.Passthrough = cfg.Passthrough || tc.Whole != nil
	return cfg
}

// testContent is the Content of fs tests, from a testConfig's fields.
type testContent struct{ tc *testConfig }

var _ readahead.Content = (*testContent)(nil)

func (c *testContent) Open(obj bucket.Object) readahead.Reader {
	if c.tc.Open != nil {
		return c.tc.Open(obj)
	}
	return &rangeReader{b: c.tc.Bucket, obj: obj}
}

func (c *testContent) OpenAhead(obj bucket.Object) readahead.Reader {
	if c.tc.OpenAhead != nil {
		return c.tc.OpenAhead(obj)
	}
	return c.Open(obj)
}

func (c *testContent) Cached(obj bucket.Object) bool {
	n, ok := c.CachedBytes(obj)
	return ok && n >= int64(obj.Size)
}

func (c *testContent) CachedBytes(obj bucket.Object) (int64, bool) {
	if c.tc.CachedBytes == nil {
		return 0, false
	}
	return c.tc.CachedBytes(obj), true
}

func (c *testContent) Whole(obj bucket.Object) (readahead.WholeFile, bool) {
	if c.tc.Whole == nil {
		return nil, false
	}
	return c.tc.Whole(obj)
}

func (c *testContent) Unready(obj bucket.Object, limit int64) []ranges.ByteRange {
	if c.tc.Unready == nil {
		return nil
	}
	return c.tc.Unready(obj, limit)
}

// readerBase is the rest of a test Reader that only reads: it splices
// nothing, tells no random reads, never reaches an end, is never opened
// ahead and holds nothing to close.
type readerBase struct{}

func (readerBase) Spliceable(int64, int) (*os.File, int, func(), bool) { return nil, 0, nil, false }
func (readerBase) ReadRandomly() (random, known bool)                  { return false, false }
func (readerBase) NotifyAtEnd(func())                                  {}
func (readerBase) Unread() bool                                        { return false }
func (readerBase) Close()                                              {}

// openDirect opens rangeReaders of b.
func openDirect(b bucket.Bucket) func(bucket.Object) readahead.Reader {
	return func(obj bucket.Object) readahead.Reader { return &rangeReader{b: b, obj: obj} }
}

// rangeReader is the test Reader: every ReadAt is one pinned ranged read
// straight from the bucket.
type rangeReader struct {
	readerBase
	b   bucket.Bucket
	obj bucket.Object
}

func (r *rangeReader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off >= int64(r.obj.Size) {
		return 0, io.EOF
	}
	rc, err := r.b.NewRangeReader(ctx, &bucket.ReadRequest{
		Name: r.obj.Name, Version: r.obj.Version,
		Range: bucket.ByteRange{Start: uint64(off), Limit: uint64(off) + uint64(len(p))},
	})
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n, err := io.ReadFull(rc, p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return n, err
}
