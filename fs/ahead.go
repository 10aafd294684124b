package fs

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"ferry/bucket"
)

// Reading ahead across files. A training loader reading a directory of
// shards in listing order pays, at every file boundary, for the link to
// drain: the last parts of one file arrive on fewer and fewer connections,
// then the next file is opened and its first bytes are one round trip
// away. Measured on the emulated link (30 ms, 477 MiB/s), the link idled
// 70-90 ms at each boundary of a 256 MiB file read by one reader.
//
// So when a file's sequential readahead reaches its end, and that file and
// the one opened before it in the same directory are neighbours in the
// directory's listing (or it is the directory's first file and the first
// opened there), the file after it is opened ahead: its first
// window is fetched while the reader finishes the current one, and the
// reader's open of that file takes over the handle. A reader in shuffled
// order almost never opens two neighbours in a row, and random reads
// never reach the end of a file's readahead, so neither triggers it.
//
// Best effort throughout: it needs a fresh listing of the directory (if
// there is none, the first file read to its end starts one in the
// background, like lookup misses do, see prefetch.go), the next file must be
// large enough to be read ahead at all, the readahead takes only free
// memory, and a file opened ahead but not opened by anyone within
// aheadUnused is closed again.
const (
	// aheadMinSize: smaller files are fetched whole by their first read,
	// in one request; readers of many small files are served by their
	// own parallelism.
	aheadMinSize = 8 << 20
	// aheadUnused is how long a file opened ahead waits for its reader.
	aheadUnused = 30 * time.Second
	// aheadMax bounds files opened ahead and not yet taken, for all
	// directories together; dirsTracked bounds the directories whose last
	// opens are remembered.
	aheadMax    = 4
	dirsTracked = 10_000
)

// aheadReader is a ContentReader that can say when its readahead reaches
// the end of the object (readahead.Handle).
type aheadReader interface {
	ContentReader
	NotifyAtEnd(fn func())
}

// lastOpens is what a directory's latest file opens were.
type lastOpens struct {
	prev, cur string // names
}

type aheadFile struct {
	path  string
	obj   bucket.Object
	r     ContentReader
	timer *time.Timer
}

type aheader struct {
	// Dependencies
	fs *fileSystem

	// Constant data
	// openAhead is Config.OpenAhead; nil turns reading ahead off.
	openAhead func(obj bucket.Object) ContentReader
	wait      time.Duration // aheadUnused; shorter in tests

	// Mutable state
	mu      sync.Mutex
	opens   map[string]lastOpens // GUARDED_BY(mu); key: directory path
	pending []*aheadFile         // GUARDED_BY(mu); oldest first
	closed  bool                 // GUARDED_BY(mu)

	// Counters: files opened ahead, taken by an open, closed unused.
	started, taken, unused atomic.Uint64
}

func newAheader(fs *fileSystem, openAhead func(obj bucket.Object) ContentReader) *aheader {
	return &aheader{fs: fs, openAhead: openAhead, wait: aheadUnused, opens: make(map[string]lastOpens)}
}

// open is called for every file open: it returns the reader opened ahead
// for exactly obj, if there is one (the caller owns it now), else nil;
// and it records the open for the directory.
func (a *aheader) open(path string, obj bucket.Object) ContentReader {
	if a.openAhead == nil {
		return nil
	}
	dir, name := splitPath(path)
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.opens) >= dirsTracked {
		clear(a.opens)
	}
	a.opens[dir] = lastOpens{prev: a.opens[dir].cur, cur: name}
	for i, p := range a.pending {
		if p.path != path {
			continue
		}
		a.pending = append(a.pending[:i:i], a.pending[i+1:]...)
		p.timer.Stop()
		if p.obj.Name == obj.Name && p.obj.Version == obj.Version && p.obj.Size == obj.Size {
			a.taken.Add(1)
			return p.r
		}
		// The name holds another version now.
		go p.r.Close()
		return nil
	}
	return nil
}

// watch arranges for atEnd(path) once r's readahead reaches its end.
func (a *aheader) watch(path string, r ContentReader) {
	if a.openAhead == nil {
		return
	}
	if ar, ok := r.(aheadReader); ok {
		ar.NotifyAtEnd(func() { a.atEnd(path) })
	}
}

// atEnd is called when the readahead of file path has reached its end:
// if path and the file opened before it in its directory are neighbours
// in the listing (or path is the first file, opened first), the file
// after path is opened ahead.
func (a *aheader) atEnd(path string) {
	dir, name := splitPath(path)
	a.mu.Lock()
	last, ok := a.opens[dir]
	a.mu.Unlock()
	if !ok || last.cur != name {
		return
	}
	entries, ok := a.fs.cache.listing(dir)
	if !ok {
		// A large file read to its end (the loader's file list came from
		// elsewhere): list the directory, for the next file boundary.
		a.fs.prefetch.want(dir)
		return
	}
	next, ok := nextFile(entries, last.prev, name)
	if !ok || next.obj.Size < aheadMinSize {
		return
	}
	nextPath := childPath(dir, next.name)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	for _, p := range a.pending {
		if p.path == nextPath {
			return
		}
	}
	if len(a.pending) >= aheadMax {
		oldest := a.pending[0]
		a.pending = a.pending[1:]
		oldest.timer.Stop()
		go oldest.r.Close()
	}
	p := &aheadFile{path: nextPath, obj: next.obj, r: a.openAhead(next.obj)}
	p.timer = time.AfterFunc(a.wait, func() { a.expire(p) })
	a.pending = append(a.pending, p)
	a.started.Add(1)
}

// nextFile returns the file after name in entries (a listing, sorted by
// name) if prev is the file before it, or if prev is "" (nothing opened
// before) and name is the first file; directories do not count.
func nextFile(entries []dirEntry, prev, name string) (dirEntry, bool) {
	at := sort.Search(len(entries), func(i int) bool { return entries[i].name >= name })
	if at == len(entries) || entries[at].name != name || entries[at].kind != kindFile {
		return dirEntry{}, false
	}
	before := at - 1
	for before >= 0 && entries[before].kind != kindFile {
		before--
	}
	if before >= 0 && entries[before].name != prev || before < 0 && prev != "" {
		return dirEntry{}, false
	}
	for i := at + 1; i < len(entries); i++ {
		if entries[i].kind == kindFile {
			return entries[i], true
		}
	}
	return dirEntry{}, false
}

// expire closes p if nobody has opened it.
func (a *aheader) expire(p *aheadFile) {
	a.mu.Lock()
	for i, q := range a.pending {
		if q == p {
			a.pending = append(a.pending[:i:i], a.pending[i+1:]...)
			a.mu.Unlock()
			a.unused.Add(1)
			p.r.Close()
			return
		}
	}
	a.mu.Unlock()
}

// stop closes every file opened ahead; later atEnd calls open nothing.
func (a *aheader) stop() {
	a.mu.Lock()
	a.closed = true
	pending := a.pending
	a.pending = nil
	a.mu.Unlock()
	for _, p := range pending {
		p.timer.Stop()
		p.r.Close()
	}
}
