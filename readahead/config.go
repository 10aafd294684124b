package readahead

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"ferry/bucket"
)

// Defaults for the tuning fields of Config. They are sized for a remote
// store with tens of milliseconds of latency and ~50 MB/s per connection:
// a window is cut into 16 parts (of at most PartSize), so even a young
// stream keeps 16 ranged GETs in flight, enough to fill a 500 MB/s link
// from one sequential reader. 4 MiB parts, not 8: a reader consumes in
// order and waits for the head part, which shares the link with 15
// others; smaller parts arrive sooner and in order. 32 connections, not
// 16: a 4 MiB GET at 50 MB/s spends about a quarter of its time on the
// round trip (30 of 114 ms), so 16 connections fill a 500 MB/s link only
// if none is ever idle; with 32, readers that grow their windows together
// (4 streams, or one stream past its first window) keep the link fuller
// (docs/notes/2026-11-30-connections.md has the measurements).
const (
	// DefaultMemoryLimit is a suggestion for the flags package; New itself
	// requires an explicit MemoryLimit.
	DefaultMemoryLimit    = 512 << 20
	DefaultMaxConnections = 32
	DefaultBlockSize      = 128 << 10
	DefaultPartSize       = 4 << 20
	DefaultInitialWindow  = 1 << 20
	// DefaultStartWindow is the first window of a stream that begins at
	// offset 0 (a file read whole, the common case in training): large
	// enough that its parts fill the link at once rather than after
	// several doublings; at most a quarter of the object. 64 MiB, not 32:
	// 32 MiB is 70 ms of a 500 MB/s link, less than the time to the first
	// byte plus the reader's first steps, so the link went idle before
	// the window could grow (measured on the emulated link,
	// docs/notes/2026-11-30-graded-parts.md). The price: a reader that reads only the
	// header of a large file and then seeks away has still asked the
	// store for a window or, with a cache (readahead then runs up to two
	// windows ahead), up to 128 MiB, half a 256 MiB file; all of it
	// within the memory budget, and cancelled when the handle closes.
	DefaultStartWindow     = 64 << 20
	DefaultMaxWindow       = 128 << 20
	DefaultSmallObjectSize = 2 << 20
	// mediumObjectSize: objects up to this size (and a part) are fetched
	// whole when a handle's first read is at offset 0 (a 2.7 MiB CosmoFlow
	// sample took 5 requests through a young readahead window).
	mediumObjectSize = 4 << 20
	// aheadWholeSize: OpenAhead fetches smaller objects whole, as Files
	// reads them ahead of their readers in runs of small files
	// (files_small.go, which takes files under 8 MiB).
	aheadWholeSize    = 8 << 20
	DefaultMaxStreams = 8
	// DefaultReorderTolerance covers the kernel's async FUSE reads, which
	// arrive out of order: the kernel's readahead of one file keeps
	// read_ahead_kb (1 MiB by default) of 1 MiB requests outstanding, and
	// 16 MiB leaves room for a larger read_ahead_kb (the connection's
	// max_background bounds them all, 64 as ferry sets it).
	DefaultReorderTolerance = 16 << 20
	DefaultGapTolerance     = 1 << 20

	// minParts is how many parts the memory budget must hold at least, so
	// that a demand read and some readahead can always coexist.
	minParts = 4
	// partsPerWindow is how many parts a window is cut into (parts are
	// at most PartSize, at least a block); a stream's first window into
	// a few more, since its k-th part is about k/partsPerWindow of a part
	// (see prefetch).
	partsPerWindow = 16
)

// Config configures a Fetcher. Zero tuning fields take the defaults above.
type Config struct {
	// Bucket is read with pinned ranged reads. Required.
	Bucket bucket.Bucket
	// Cache is the local block cache; nil means no disk cache, in which case
	// prefetched parts stay in (budgeted) memory until they are read.
	Cache BlockCache
	// MemoryLimit bounds every buffer this package allocates, in bytes.
	// Required: > 0 and at least 4 parts.
	MemoryLimit int64
	// MaxConnections bounds concurrent ranged reads for the whole Fetcher.
	MaxConnections int
	// BlockSize is the fetch granularity when Cache is nil (with a Cache,
	// Cache.BlockSize() is used).
	BlockSize int64
	Logger    *slog.Logger
	// Registerer receives the ferry_readahead_* metrics; nil registers none.
	Registerer prometheus.Registerer
	// OffHeap, if set, is told how many bytes of buffers are mapped outside
	// the Go heap (see mappedBuffers) whenever that changes, so that the
	// caller can lower the runtime's memory limit by as much. It is called
	// with a lock held: it must not call back into the Fetcher.
	OffHeap func(bytes int64)

	// PartSize is the size of one ranged GET of readahead (rounded up to a
	// multiple of the block size).
	PartSize int64
	// StartWindow is the first window of a stream that begins at offset
	// 0 (at most a quarter of the object, at least InitialWindow).
	StartWindow int64
	// InitialWindow and MaxWindow bound a sequential stream's readahead
	// window; it doubles while the reader keeps consuming it.
	InitialWindow, MaxWindow int64
	// SmallObjectSize: objects up to this size are fetched whole, in one
	// request, on the first read. Negative disables.
	SmallObjectSize int64
	// MaxStreams is how many sequential streams one handle tracks (LRU).
	MaxStreams int
	// ReorderTolerance is how far behind a stream's cursor a read may land
	// and still belong to it (kernel readahead reorders requests).
	ReorderTolerance int64
	// GapTolerance is how far ahead of a stream's cursor a read may land
	// and still count as sequential.
	GapTolerance int64
}

// withDefaults validates c and fills in defaults. blockSize is the block
// size actually used (the cache's, if there is one).
func (c Config) withDefaults() (Config, error) {
	if c.Bucket == nil {
		return c, fmt.Errorf("readahead: %w: Bucket is required", ErrInvalid)
	}
	if c.Cache != nil {
		c.BlockSize = c.Cache.BlockSize()
		if c.BlockSize <= 0 {
			return c, fmt.Errorf("readahead: %w: cache block size %d", ErrInvalid, c.BlockSize)
		}
	}
	if c.BlockSize < 0 {
		return c, fmt.Errorf("readahead: %w: BlockSize %d < 0", ErrInvalid, c.BlockSize)
	}
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.MaxConnections < 0 {
		return c, fmt.Errorf("readahead: %w: MaxConnections %d < 0", ErrInvalid, c.MaxConnections)
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.PartSize <= 0 {
		c.PartSize = DefaultPartSize
	}
	c.PartSize = alignUp(c.PartSize, c.BlockSize)
	if c.InitialWindow <= 0 {
		c.InitialWindow = DefaultInitialWindow
	}
	if c.MaxWindow <= 0 {
		c.MaxWindow = DefaultMaxWindow
	}
	if c.SmallObjectSize == 0 {
		c.SmallObjectSize = DefaultSmallObjectSize
	}
	if c.SmallObjectSize > c.PartSize {
		// A small object is one demand read; demand reads are at most a part.
		c.SmallObjectSize = c.PartSize
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.ReorderTolerance <= 0 {
		c.ReorderTolerance = DefaultReorderTolerance
	}
	if c.GapTolerance <= 0 {
		c.GapTolerance = DefaultGapTolerance
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MemoryLimit <= 0 {
		return c, fmt.Errorf("readahead: %w: memory limit must be > 0, got %d", ErrInvalid, c.MemoryLimit)
	}
	if c.MemoryLimit < minParts*c.PartSize {
		return c, fmt.Errorf("readahead: %w: memory limit %d is below %d parts of %d bytes",
			ErrInvalid, c.MemoryLimit, minParts, c.PartSize)
	}
	// One stream's window never takes more than half the budget, so that
	// demand reads and other streams keep room.
	if c.MaxWindow > c.MemoryLimit/2 {
		c.MaxWindow = c.MemoryLimit / 2
	}
	if c.StartWindow <= 0 {
		c.StartWindow = DefaultStartWindow
	}
	c.StartWindow = min(c.StartWindow, c.MaxWindow)
	if c.InitialWindow > c.MaxWindow {
		c.InitialWindow = c.MaxWindow
	}
	return c, nil
}

func alignUp(n, a int64) int64   { return (n + a - 1) / a * a }
func alignDown(n, a int64) int64 { return n / a * a }
