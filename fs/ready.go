package fs

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"ferry/bucket"
	"ferry/readahead"
)

// Readying: a file read through ferry is passthrough at a later open only
// once the disk cache holds it whole and reads have checked it
// (BackingFile.CheckAsRead; up to passthroughMaxSize, a file its reads
// left unchecked is read whole at its next open instead). A reader that skips a
// little of every file (a header, the tail after its last record, records
// laid across the file from an offset) would keep its files off
// passthrough for good: the next epoch skips the same bytes. So when a
// handle that read through ferry is released and at most readyMaxBytes,
// and at most an eighth of the file, stand in the way (Content.Unready),
// ferry reads them then, in the background, through the same reader as
// any handle: it fetches and caches the missing blocks, and its reads of
// cached ones count toward the check. Never more: a reader of part of a
// file does not make ferry download the rest. And not again and again:
// a file is readied again only if what stands in its way changed, or
// after readyRetry (a full disk cache, or a store that fails, would
// otherwise have every release fetch the same bytes).

// readyMaxBytes bounds what readying one file reads; its buffer is
// ferry's own memory, besides --memory-limit (at most readyMaxRunning
// times this).
const readyMaxBytes = 1 << 20

// readyMaxRunning bounds the files being readied at once; a release that
// finds them all busy readies nothing (the next release of the file may).
const readyMaxRunning = 4

// readyRetry is how long a file readied in vain waits before it is tried
// again with the same bytes in its way.
const readyRetry = 10 * time.Minute

// readyTriedMax bounds the files remembered as tried; past it, those
// tried before readyRetry ago are forgotten.
const readyTriedMax = 1 << 16

type readyKey struct {
	name, version string
	size          uint64
}

// readyTry is the last readying of a file: when, and what stood in its
// way then.
type readyTry struct {
	at     time.Time
	ranges []bucket.ByteRange
}

// readier readies files after their handles are released.
type readier struct {
	content readahead.Content
	on      bool // Config.Passthrough
	log     *slog.Logger
	now     func() time.Time
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex
	busy    map[readyKey]bool     // GUARDED_BY(mu); being readied
	tried   map[readyKey]readyTry // GUARDED_BY(mu)
	stopped bool                  // GUARDED_BY(mu)

	files, bytes atomic.Uint64 // readied (nothing stood in the way after), bytes read; for the metrics and tests
}

func newReadier(content readahead.Content, on bool, log *slog.Logger, now func() time.Time) *readier {
	r := &readier{content: content, on: on, log: log, now: now, busy: map[readyKey]bool{}, tried: map[readyKey]readyTry{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// released readies obj, whose handle read through ferry was just
// released, if little stands between it and passthrough. Only called
// where passthrough is granted.
func (r *readier) released(obj bucket.Object) {
	if !r.on {
		return
	}
	limit := min(readyMaxBytes, int64(obj.Size/8))
	ranges := r.content.Unready(obj, limit)
	if len(ranges) == 0 {
		return
	}
	k := readyKey{obj.Name, obj.Version, obj.Size}
	now := r.now()
	r.mu.Lock()
	if t, ok := r.tried[k]; r.stopped || r.busy[k] || len(r.busy) >= readyMaxRunning ||
		ok && now.Sub(t.at) < readyRetry && slices.Equal(t.ranges, ranges) {
		r.mu.Unlock()
		return
	}
	if len(r.tried) >= readyTriedMax {
		for k, t := range r.tried {
			if now.Sub(t.at) >= readyRetry {
				delete(r.tried, k)
			}
		}
	}
	r.tried[k] = readyTry{now, ranges}
	r.busy[k] = true
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		r.read(obj, ranges)
		if len(r.content.Unready(obj, limit)) == 0 {
			r.files.Add(1)
		}
		r.mu.Lock()
		delete(r.busy, k)
		r.mu.Unlock()
	}()
}

// read reads ranges of obj through a reader of its own.
func (r *readier) read(obj bucket.Object, ranges []bucket.ByteRange) {
	reader := r.content.Open(obj)
	defer reader.Close()
	var buf []byte
	for _, rg := range ranges {
		l := int64(rg.Len())
		if int64(len(buf)) < l {
			buf = make([]byte, l)
		}
		got, err := reader.ReadAt(r.ctx, buf[:l], int64(rg.Start))
		r.bytes.Add(uint64(got))
		if err != nil && int64(got) < l {
			r.log.Debug("fs: cannot read the rest of a file for passthrough", "path", obj.Name, "err", err)
			return
		}
	}
}

// stop cancels what is being read and waits for it.
func (r *readier) stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}
