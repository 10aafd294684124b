package fs

import (
	"context"
	"sync"
	"sync/atomic"

	"ferry/bucket"
)

// Readying: a file read through ferry is passthrough at a later open only
// once the disk cache holds it whole (and, above passthroughMaxSize, once
// reads have checked it: BackingFile.CheckAsRead). A reader that skips a
// little of every file (a header, the tail after its last record, records
// laid across the file from an offset) would keep its files off
// passthrough for good: the next epoch skips the same bytes. So when a
// handle read through ferry is released and at most readyMaxBytes, and at
// most an eighth of the file, stand in the way (Config.Unready), ferry
// reads them then, in the background, through the same reader as any
// handle: it fetches and caches the missing blocks, and its reads of
// cached ones count toward the check. Never more: a reader of part of a
// file does not make ferry download the rest.

// readyMaxBytes bounds what readying one file reads.
const readyMaxBytes = 1 << 20

// readyMaxRunning bounds the files being readied at once; a release that
// finds them all busy readies nothing (the next release of the file may).
const readyMaxRunning = 4

type readyKey struct {
	name, version string
	size          uint64
}

// readier readies files after their handles are released.
type readier struct {
	fs      *fileSystem
	unready func(obj bucket.Object, max int64) [][2]int64 // Config.Unready; nil: off
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex
	busy    map[readyKey]bool // GUARDED_BY(mu)
	stopped bool              // GUARDED_BY(mu)

	files, bytes atomic.Uint64 // readied, for the metrics and tests
}

func newReadier(fs *fileSystem, unready func(obj bucket.Object, max int64) [][2]int64) *readier {
	r := &readier{fs: fs, unready: unready, busy: map[readyKey]bool{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// released readies obj, whose handle read through ferry was just
// released, if little stands between it and passthrough.
func (r *readier) released(obj bucket.Object) {
	if r.unready == nil || !r.fs.passthroughGranted() || r.fs.pt.off.Load() {
		return
	}
	k := readyKey{obj.Name, obj.Version, obj.Size}
	r.mu.Lock()
	if r.stopped || r.busy[k] || len(r.busy) >= readyMaxRunning {
		r.mu.Unlock()
		return
	}
	r.busy[k] = true
	r.mu.Unlock()
	ranges := r.unready(obj, min(readyMaxBytes, int64(obj.Size/8)))
	if len(ranges) == 0 {
		r.done(k)
		return
	}
	r.mu.Lock()
	if r.stopped {
		delete(r.busy, k)
		r.mu.Unlock()
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		defer r.done(k)
		r.read(obj, ranges)
	}()
}

func (r *readier) done(k readyKey) {
	r.mu.Lock()
	delete(r.busy, k)
	r.mu.Unlock()
}

// read reads ranges of obj through a reader of its own.
func (r *readier) read(obj bucket.Object, ranges [][2]int64) {
	reader := r.fs.open(obj)
	defer reader.Close()
	var buf []byte
	var n int64
	for _, rg := range ranges {
		if l := rg[1] - rg[0]; int64(len(buf)) < l {
			buf = make([]byte, l)
		}
		got, err := reader.ReadAt(r.ctx, buf[:rg[1]-rg[0]], rg[0])
		n += int64(got)
		if err != nil && int64(got) < rg[1]-rg[0] {
			r.fs.log.Debug("fs: cannot read the rest of a file for passthrough", "path", obj.Name, "err", err)
			return
		}
	}
	r.files.Add(1)
	r.bytes.Add(uint64(n))
}

// stop cancels what is being read and waits for it.
func (r *readier) stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}
