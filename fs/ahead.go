package fs

import (
	"slices"
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
// So when a file's sequential readahead drains at its end, and that file
// and the two opened before it in the same directory are consecutive in
// the directory's listing, the file after it is opened ahead: its first
// window is fetched while the reader finishes the current one, and the
// reader's open of that file takes over the handle. At the start of the
// listing fewer opens count: its first file, if it was the first opened
// in the directory, or its first two, opened first and in order (a loader
// starting a directory from its first shard). A reader in shuffled order
// rarely opens three neighbours in a row, or the first file first, and
// random reads never reach the end of a file's readahead, so neither
// triggers it often.
//
// Best effort throughout: it needs a fresh listing of the directory (if
// there is none, the first file opened in the directory starts one in the
// background once it has been read from its start to aheadListAfter, and a
// file read to its end does, like lookup misses do, see prefetch.go), the
// next file must be large enough to be read ahead at all, the readahead
// takes only free memory (and gives it back to other readahead until its
// reader comes), at most aheadMax large files wait for their readers (a
// new one is dropped, not an older one: readers of several directories in
// turn come back in that order), and a file opened ahead but not opened by
// anyone within aheadUnused is closed again.
const (
	// aheadMinSize: smaller files are fetched whole, in one request (by
	// their first read); they are read ahead by the rule for small files
	// (ahead_small.go).
	aheadMinSize = 8 << 20
	// aheadListAfter: a file read from its start this far is read on, not
	// probed, so its directory is worth listing for its end
	// (readOnFromStart). head and header checks read far less; file(1)
	// reads the first 7 MiB, and 7 MiB at the end, which is why only reads
	// in the aheadListBand after it count, where a reader going on from
	// the start passes (the kernel's reads are at most 1 MiB).
	aheadListAfter = 16 << 20
	aheadListBand  = 4 << 20
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

// unreadReader is a reader opened ahead that can say whether it has been
// read since (readahead.Handle).
type unreadReader interface {
	Unread() bool
}

// lastOpens is what a directory's latest opens of distinct files were:
// names, the most recent last ("" for none).
type lastOpens struct {
	before, prev, cur string
}

type aheadFile struct {
	path  string
	after string // the name whose end opened it: while the directory's last open is still that, it is due
	obj   bucket.Object
	r     ContentReader
	timer *time.Timer
	// small: opened ahead of a run of small files (ahead_small.go), at
	// index idx of the listing, for the run numbered gen.
	small bool
	idx   int
	gen   uint64
	// charged: a small file taken by an open and not read yet, still
	// counted in smallFiles and smallBytes. GUARDED_BY(aheader.mu)
	charged bool
}

type aheader struct {
	// Dependencies
	fs *fileSystem

	// Constant data
	// openAhead is Config.OpenAhead; nil turns reading ahead off.
	openAhead func(obj bucket.Object) ContentReader
	wait      time.Duration // aheadUnused; shorter in tests
	maxBytes  int64         // bytes of small files that may wait (ahead_small.go)

	// Mutable state
	mu      sync.Mutex
	opened  *sync.Cond           // broadcast (with mu) when an open ahead ends
	opens   map[string]lastOpens // GUARDED_BY(mu); key: directory path
	pending []*aheadFile         // GUARDED_BY(mu); oldest first
	opening map[string]bool      // GUARDED_BY(mu); paths being opened ahead now
	held    map[string]int       // GUARDED_BY(mu); paths with handles open, how many
	closed  bool                 // GUARDED_BY(mu)
	// Small files (ahead_small.go): each directory's runs of opens, the
	// last run's number, and the small files opened ahead (waiting, being
	// opened, or taken and not read yet) with their bytes.
	runs       map[string]*dirRuns // GUARDED_BY(mu); key: directory path
	gen        uint64              // GUARDED_BY(mu)
	smallFiles int                 // GUARDED_BY(mu)
	smallBytes int64               // GUARDED_BY(mu)

	// Counters: files opened ahead, taken by an open, closed unused.
	started, taken, unused atomic.Uint64
}

// newAheader reads ahead through openAhead (nil: never); maxBytes bounds
// the small files waiting for readers (0: smallAheadBytes).
func newAheader(fs *fileSystem, openAhead func(obj bucket.Object) ContentReader, maxBytes int64) *aheader {
	if maxBytes <= 0 || maxBytes > smallAheadBytes {
		maxBytes = smallAheadBytes
	}
	a := &aheader{fs: fs, openAhead: openAhead, wait: aheadUnused, maxBytes: maxBytes,
		opens: make(map[string]lastOpens), opening: make(map[string]bool), held: make(map[string]int),
		runs: make(map[string]*dirRuns)}
	a.opened = sync.NewCond(&a.mu)
	return a
}

// open is called for every file open: it returns the file opened ahead
// for exactly obj, if there is one (the caller owns its reader now, and
// hands it back to release), else nil; and it records the open for the
// directory. Every open is matched by a call of handleReleased when its
// handle is released.
func (a *aheader) open(path string, obj bucket.Object) *aheadFile {
	if a.openAhead == nil {
		return nil
	}
	dir, name := splitPath(path)
	a.mu.Lock()
	defer a.mu.Unlock()
	// A file being opened ahead right now is waited for (opening ahead
	// does no I/O, it only starts fetches): opening it a second time
	// would fetch it twice.
	for a.opening[path] {
		a.opened.Wait()
	}
	a.held[path]++
	if len(a.opens) >= dirsTracked {
		clear(a.opens)
	}
	if last := a.opens[dir]; last.cur != name { // a second open of one file is no step
		a.opens[dir] = lastOpens{before: last.prev, prev: last.cur, cur: name}
	}
	if i := a.indexLocked(path); i >= 0 {
		p := a.removeLocked(i)
		if sameObject(p.obj, obj) {
			a.taken.Add(1)
			if p.small {
				// Counted until its first read (firstRead) or release: a
				// probe (released unread) puts it back, and its place
				// must still be there.
				p.charged = true
				a.smallFiles++
				a.smallBytes += int64(p.obj.Size)
			}
			return p
		}
		// The name holds another version now.
		a.unused.Add(1)
		go p.r.Close()
		return nil
	}
	return nil
}

// handleReleased is called when a handle of path is released.
func (a *aheader) handleReleased(path string) {
	if a.openAhead == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held[path]--; a.held[path] <= 0 {
		delete(a.held, path)
	}
}

// sameObject reports whether a and b are the same object version. Without
// versions (Version "") a rewrite of the same size shows only in Updated.
func sameObject(a, b bucket.Object) bool {
	return a.Name == b.Name && a.Version == b.Version && a.Size == b.Size &&
		(a.Version != "" || a.Updated.Equal(b.Updated))
}

// doneOpeningLocked ends the reservation of path taken before opening it
// ahead, and wakes the opens waiting for it. LOCKS_REQUIRED(a.mu)
func (a *aheader) doneOpeningLocked(path string) {
	delete(a.opening, path)
	a.opened.Broadcast()
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

// atEnd is called when the readahead of file path has drained at its
// end: if path and the two files opened before it in its directory are
// consecutive in the listing, the file after path is opened ahead.
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
		// The loader's file list came from elsewhere. If the names opened
		// so far go up, list the directory, for the next file boundary.
		if last.prev < name {
			a.fs.prefetch.want(dir)
		}
		return
	}
	next, ok := nextFile(entries, last)
	if !ok || next.obj.Size < aheadMinSize {
		return
	}
	nextPath := childPath(dir, next.name)
	// admit decides under a.mu whether nextPath may be opened ahead now.
	admit := func() bool {
		if a.closed || a.opens[dir].cur != name {
			return false // closed, or the reader moved on (perhaps to nextPath)
		}
		if a.indexLocked(nextPath) >= 0 {
			return false
		}
		return a.largeLocked() < aheadMax || a.evictStaleLocked()
	}
	a.mu.Lock()
	ok = !a.opening[nextPath] && admit()
	if ok {
		a.opening[nextPath] = true
	}
	a.mu.Unlock()
	if !ok {
		return
	}
	// Opened outside the lock: every open waits for it.
	p := &aheadFile{path: nextPath, after: name, obj: next.obj, r: a.openAhead(next.obj)}
	a.mu.Lock()
	a.doneOpeningLocked(nextPath)
	if !fetching(p.r) || !admit() {
		a.mu.Unlock()
		p.r.Close()
		return
	}
	a.addLocked(p)
	a.started.Add(1)
	a.mu.Unlock()
}

// States of fileHandle.fromStart.
const (
	startUnseen int32 = iota // no read at offset 0 yet
	startSeen                // read at offset 0, not yet at aheadListAfter
	startListed              // read on: readOnFromStart has run
)

// readAt is called for every read of h, a large file, at off. Once h has
// been read at offset 0 and then within aheadListBand after
// aheadListAfter, it calls readOnFromStart, again at the next such read if
// that found the listing budget busy. (A read in the band that arrives
// before any read at 0 does not count; a reader going on from the start
// makes several reads in the band, and the later ones come after it.)
func (a *aheader) readAt(h *fileHandle, off int64) {
	switch {
	case off == 0:
		h.fromStart.CompareAndSwap(startUnseen, startSeen)
	case off >= aheadListAfter && off < aheadListAfter+aheadListBand &&
		h.fromStart.Load() == startSeen && h.fromStart.CompareAndSwap(startSeen, startListed):
		if a.readOnFromStart(h.in.path) {
			h.fromStart.Store(startSeen)
		}
	}
}

// readOnFromStart is called once a handle of path, a large file, has been
// read from its start to aheadListAfter. If path is the first file opened
// in its directory and the directory has no fresh listing, one is started
// in the background: should the reader go on to the end of the file, the
// listing says by then which file comes next (atEnd). Started at the end,
// it would come a round trip too late for the first file boundary. It
// reports busy if the listing budget was busy: worth a later try.
func (a *aheader) readOnFromStart(path string) (busy bool) {
	dir, name := splitPath(path)
	a.mu.Lock()
	last := a.opens[dir]
	a.mu.Unlock()
	if last.cur != name || last.prev != "" {
		return false
	}
	if _, ok := a.fs.cache.listing(dir); ok {
		return false
	}
	return a.fs.prefetch.want(dir)
}

// fetching reports whether r, just opened ahead, is fetching anything:
// with the file cached already, or no memory free, it is not worth
// keeping.
func fetching(r ContentReader) bool {
	u, ok := r.(unreadReader)
	return !ok || u.Unread()
}

// indexLocked returns the index in a.pending of the file of path, or -1.
// LOCKS_REQUIRED(a.mu)
func (a *aheader) indexLocked(path string) int {
	return slices.IndexFunc(a.pending, func(p *aheadFile) bool { return p.path == path })
}

// removeLocked takes a.pending[i] out of the waiting files and stops its
// timer. LOCKS_REQUIRED(a.mu)
func (a *aheader) removeLocked(i int) *aheadFile {
	p := a.pending[i]
	a.pending = slices.Delete(a.pending, i, i+1)
	p.timer.Stop()
	if p.small {
		a.smallFiles--
		a.smallBytes -= int64(p.obj.Size)
	}
	return p
}

// largeLocked counts the waiting files opened at the end of another (not
// small ones). LOCKS_REQUIRED(a.mu)
func (a *aheader) largeLocked() int {
	n := 0
	for _, p := range a.pending {
		if !p.small {
			n++
		}
	}
	return n
}

// addLocked makes p wait for its reader, for at most a.wait. A small
// file's place (smallFiles, smallBytes) must have been taken already.
// LOCKS_REQUIRED(a.mu)
func (a *aheader) addLocked(p *aheadFile) {
	p.timer = time.AfterFunc(a.wait, func() { a.expire(p) })
	a.pending = append(a.pending, p)
}

// evictStaleLocked closes the oldest waiting large file whose directory's
// reader has moved on to another file (stopped, or skipped it), so that
// it does not hold a place for the rest of its wait. It reports whether
// it did. LOCKS_REQUIRED(a.mu)
func (a *aheader) evictStaleLocked() bool {
	return a.evictFirstLocked(func(p *aheadFile) bool {
		dir, _ := splitPath(p.path)
		return !p.small && a.opens[dir].cur != p.after
	})
}

// evictFirstLocked closes the oldest waiting file for which stale is
// true, counting it unused. It reports whether there was one.
// LOCKS_REQUIRED(a.mu)
func (a *aheader) evictFirstLocked(stale func(p *aheadFile) bool) bool {
	for i, p := range a.pending {
		if stale(p) {
			a.removeLocked(i)
			a.unused.Add(1)
			go p.r.Close()
			return true
		}
	}
	return false
}

// release is called when a file handle whose reader was taken from the
// files opened ahead (p, as open returned it) is released. If the reader
// was never read (the open was a probe: a stat through open, a check for
// existence), it waits again for the next open, instead of what it
// fetched being thrown away. It reports whether it kept the reader; if
// not, the caller closes it.
func (a *aheader) release(p *aheadFile) bool {
	dir, name := splitPath(p.path)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unchargeLocked(p)
	if u, ok := p.r.(unreadReader); !ok || !u.Unread() {
		return false
	}
	if a.closed || a.indexLocked(p.path) >= 0 || a.opening[p.path] || a.held[p.path] > 0 {
		return false
	}
	q := &aheadFile{path: p.path, obj: p.obj, r: p.r, small: p.small, idx: p.idx, gen: p.gen}
	if q.small {
		if !a.smallRoomLocked(int64(q.obj.Size)) {
			return false
		}
		a.smallFiles++
		a.smallBytes += int64(q.obj.Size)
	} else {
		if a.largeLocked() >= aheadMax {
			return false
		}
		q.after = name // due while the directory's last open is this file
		if a.opens[dir].cur != name {
			q.after = "" // the reader moved on: stale at once if a place is needed
		}
	}
	a.addLocked(q)
	a.taken.Add(^uint64(0)) // not taken after all: counted when it is
	return true
}

// nextFile returns the file after last.cur in entries (a listing) if
// last.before, last.prev and last.cur are the files before it, in order;
// at the listing's start the opens before its first file are "" (none).
// Directories do not count (and may sit out of order between a listing's
// pages, files never do).
func nextFile(entries []dirEntry, last lastOpens) (dirEntry, bool) {
	var p2, p1 string // the two files before entries[i] in the listing
	found := false
	for _, e := range entries {
		if e.kind != kindFile {
			continue
		}
		if found {
			return e, true
		}
		if e.name == last.cur {
			if p1 != last.prev || p2 != last.before {
				return dirEntry{}, false
			}
			found = true
		}
		p2, p1 = p1, e.name
	}
	return dirEntry{}, false
}

// expire closes p if nobody has opened it.
func (a *aheader) expire(p *aheadFile) {
	a.mu.Lock()
	i := a.indexLocked(p.path)
	if i < 0 || a.pending[i] != p {
		a.mu.Unlock()
		return
	}
	a.removeLocked(i)
	a.mu.Unlock()
	a.unused.Add(1)
	p.r.Close()
}

// dropUnder closes the files opened ahead at or under p ("" for all): an
// invalidation forgets them, so that the next open fetches again (after
// `ferry invalidate --data`, through the disk cache, which a waiting
// file's bytes would otherwise bypass). It returns how many it closed.
func (a *aheader) dropUnder(p string) int {
	a.mu.Lock()
	var drop []*aheadFile
	for i := len(a.pending) - 1; i >= 0; i-- {
		if under(a.pending[i].path, p) {
			drop = append(drop, a.removeLocked(i))
		}
	}
	a.mu.Unlock()
	for _, f := range drop {
		f.r.Close()
	}
	return len(drop)
}

// stop closes every file opened ahead; later atEnd calls open nothing.
func (a *aheader) stop() {
	a.mu.Lock()
	a.closed = true
	pending := slices.Clone(a.pending)
	for len(a.pending) > 0 {
		a.removeLocked(len(a.pending) - 1)
	}
	a.mu.Unlock()
	for _, p := range pending {
		p.r.Close()
	}
}
