package readahead

import (
	"context"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"ferry/bucket"
	"ferry/metadata"
)

// Reading ahead across files: Files opens the readers of a mount's file
// handles, and opens ahead the files a reader is expected to open next,
// so that their first bytes are on their way while it finishes the one
// before. Two rules decide which, both from the directory's listing:
// large files read whole in listing order (this file), and runs of
// small files opened in listing order (files_small.go).
//
// Large files. A training loader reading a directory of shards in listing
// order pays, at every file boundary, for the link to drain: the last
// parts of one file arrive on fewer and fewer connections, then the next
// file is opened and its first bytes are one round trip away. Measured on
// the emulated link (30 ms, 477 MiB/s), the link idled 70-90 ms at each
// boundary of a 256 MiB file read by one reader.
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
// file read to its end does), the next file must be large enough to be
// read ahead at all, the readahead takes only free memory and never what
// another file opened ahead holds (Fetcher.OpenAhead), at most aheadMax
// large files wait for their readers (a new one is dropped, not an older
// one: readers of several directories in turn come back in that order),
// and a file opened ahead but not opened by anyone within aheadUnused is
// closed again.
const (
	// aheadMinSize: smaller files are fetched whole, in one request (by
	// their first read); they are read ahead by the rule for small files
	// (files_small.go).
	aheadMinSize = aheadWholeSize
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

// Directories is what Files needs to know of the mounted tree: package fs
// implements it over package metadata and what the kernel holds.
type Directories interface {
	// Listing returns a fresh, complete listing of dir, if there is one.
	Listing(dir string) (*metadata.Listing, bool)
	// ListSoon starts listing dir in the background; busy reports that
	// only the budget of such listings stopped it (a later call may
	// succeed).
	ListSoon(dir string) (busy bool)
	// ReadBefore reports whether the file at path has been read through
	// the mount in obj's version on an inode the kernel still holds: the
	// kernel may still have its pages, and fetching it again would be
	// for nobody.
	ReadBefore(path string, obj bucket.Object) bool
}

// lastOpens is what a directory's latest opens of distinct files were:
// names, the most recent last ("" for none).
type lastOpens struct {
	before, prev, cur string
}

// aheadFile is a file opened ahead of its reader.
type aheadFile struct {
	path  string
	after string // the name whose end opened it: while the directory's last open is still that, it is due
	obj   bucket.Object
	r     Reader
	timer *time.Timer
	// small: opened ahead of a run of small files (files_small.go), at
	// index idx of the listing, for the run numbered gen.
	small bool
	idx   int
	gen   uint64
	// charged: a small file taken by an open and not read yet, still
	// counted in smallFiles. GUARDED_BY(Files.mu)
	charged bool
}

// Files opens the readers of one mount's file handles through a Content
// and, when reading ahead across files is on, opens files ahead of their
// readers. All methods are safe for concurrent use.
//
// LOCK ORDER: Files.mu, then whatever Directories locks (Files calls
// ReadBefore with mu held).
type Files struct {
	// Dependencies
	content Content
	dirs    Directories

	// Constant data
	on       bool          // read ahead across files at all
	wait     time.Duration // aheadUnused; shorter in tests
	maxSmall int           // smallAheadMax; smaller in tests

	// Mutable state
	mu      sync.Mutex
	opened  *sync.Cond           // broadcast (with mu) when an open ahead ends
	opens   map[string]lastOpens // GUARDED_BY(mu); key: directory path
	pending []*aheadFile         // GUARDED_BY(mu); oldest first
	opening map[string]bool      // GUARDED_BY(mu); paths being opened ahead now
	held    map[string]int       // GUARDED_BY(mu); paths with handles open, how many
	closed  bool                 // GUARDED_BY(mu)
	// Small files (files_small.go): each directory's runs of opens, the
	// last run's number, and the small files opened ahead (waiting, being
	// opened, or taken and not read yet).
	runs       map[string]*dirRuns // GUARDED_BY(mu); key: directory path
	gen        uint64              // GUARDED_BY(mu)
	smallFiles int                 // GUARDED_BY(mu)

	// Counters: files opened ahead, taken by an open, closed unused.
	started, taken, unused atomic.Uint64
}

// NewFiles opens readers through content; with ahead, it reads ahead
// across files, as dirs' listings say. Close stops it.
func NewFiles(content Content, dirs Directories, ahead bool) *Files {
	fl := &Files{content: content, dirs: dirs, on: ahead, wait: aheadUnused, maxSmall: smallAheadMax,
		opens: make(map[string]lastOpens), opening: make(map[string]bool), held: make(map[string]int),
		runs: make(map[string]*dirRuns)}
	fl.opened = sync.NewCond(&fl.mu)
	return fl
}

// FilesStats counts files opened ahead, those whose handle an open took
// over, and those closed unused.
type FilesStats struct {
	Started, Taken, Unused uint64
}

// Stats returns the counters.
func (fl *Files) Stats() FilesStats {
	return FilesStats{Started: fl.started.Load(), Taken: fl.taken.Load(), Unused: fl.unused.Load()}
}

// Open returns the reader of a new handle of the file at path, in obj's
// version: the one opened ahead for it if there is one, else a new one
// from the Content. It counts as an open of the file in its directory.
// The reader's Close ends the handle.
func (fl *Files) Open(path string, obj bucket.Object) Reader {
	if !fl.on {
		return fl.content.Open(obj)
	}
	ahead := fl.take(path, obj)
	f := &file{fl: fl, path: path, obj: obj, ahead: ahead}
	if ahead != nil {
		f.Reader = ahead.r
	} else {
		f.Reader = fl.content.Open(obj)
	}
	f.Reader.NotifyAtEnd(func() { fl.atEnd(path) })
	fl.openedSmall(path, obj)
	return f
}

// Opened records a new handle of the file at path whose bytes do not
// come through a reader (the kernel reads the disk cache's file itself):
// it counts as an open of the file in its directory, and a reader opened
// ahead for it is closed. Closed must follow when the handle ends.
func (fl *Files) Opened(path string, obj bucket.Object) {
	if !fl.on {
		return
	}
	if ahead := fl.take(path, obj); ahead != nil && !fl.release(ahead) {
		ahead.r.Close()
	}
	fl.openedSmall(path, obj)
}

// Closed ends a handle recorded by Opened.
func (fl *Files) Closed(path string) {
	if fl.on {
		fl.handleReleased(path)
	}
}

// take is called for every open of path: it returns the file opened ahead
// for exactly obj, if there is one (the caller owns its reader now, and
// hands it back to release), else nil; and it records the open for the
// directory. Every take is matched by a handleReleased when the handle
// ends.
func (fl *Files) take(path string, obj bucket.Object) *aheadFile {
	dir, name := metadata.SplitPath(path)
	fl.mu.Lock()
	defer fl.mu.Unlock()
	// A file being opened ahead right now is waited for (opening ahead
	// does no I/O, it only starts fetches): opening it a second time
	// would fetch it twice.
	for fl.opening[path] {
		fl.opened.Wait()
	}
	fl.held[path]++
	if len(fl.opens) >= dirsTracked {
		clear(fl.opens)
	}
	if last := fl.opens[dir]; last.cur != name { // a second open of one file is no step
		fl.opens[dir] = lastOpens{before: last.prev, prev: last.cur, cur: name}
	}
	i := fl.indexLocked(path)
	if i < 0 {
		return nil
	}
	p := fl.removeLocked(i)
	if p.obj.SameVersion(&obj) {
		fl.taken.Add(1)
		if p.small {
			// Counted until its first read (firstRead) or release: a
			// probe (released unread) puts it back, and its place must
			// still be there.
			p.charged = true
			fl.smallFiles++
		}
		return p
	}
	// The name holds another version now.
	fl.unused.Add(1)
	go p.r.Close()
	return nil
}

// handleReleased is called when a handle of path ends.
func (fl *Files) handleReleased(path string) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.held[path]--; fl.held[path] <= 0 {
		delete(fl.held, path)
	}
}

// doneOpeningLocked ends the reservation of path taken before opening it
// ahead, and wakes the opens waiting for it. LOCKS_REQUIRED(fl.mu)
func (fl *Files) doneOpeningLocked(path string) {
	delete(fl.opening, path)
	fl.opened.Broadcast()
}

// atEnd is called when the readahead of file path has drained at its
// end: if path and the two files opened before it in its directory are
// consecutive in the listing, the file after path is opened ahead.
func (fl *Files) atEnd(path string) {
	dir, name := metadata.SplitPath(path)
	fl.mu.Lock()
	last, ok := fl.opens[dir]
	fl.mu.Unlock()
	if !ok || last.cur != name {
		return
	}
	listing, ok := fl.dirs.Listing(dir)
	if !ok {
		// The loader's file list came from elsewhere. If the names opened
		// so far go up, list the directory, for the next file boundary.
		if last.prev < name {
			fl.dirs.ListSoon(dir)
		}
		return
	}
	next, obj, ok := nextFile(listing, last)
	if !ok || obj.Size < aheadMinSize {
		return
	}
	nextPath := metadata.ChildPath(dir, next)
	// admit decides under fl.mu whether nextPath may be opened ahead now.
	admit := func() bool {
		if fl.closed || fl.opens[dir].cur != name {
			return false // closed, or the reader moved on (perhaps to nextPath)
		}
		if fl.indexLocked(nextPath) >= 0 {
			return false
		}
		return fl.largeLocked() < aheadMax || fl.evictStaleLocked()
	}
	fl.mu.Lock()
	ok = !fl.opening[nextPath] && admit()
	if ok {
		fl.opening[nextPath] = true
	}
	fl.mu.Unlock()
	if !ok {
		return
	}
	// Opened outside the lock: every open waits for it.
	p := &aheadFile{path: nextPath, after: name, obj: obj, r: fl.content.OpenAhead(obj)}
	fl.mu.Lock()
	fl.doneOpeningLocked(nextPath)
	if !p.r.Unread() || !admit() {
		// Nothing to fetch (cached already, or no memory free), or no
		// longer wanted.
		fl.mu.Unlock()
		p.r.Close()
		return
	}
	fl.addLocked(p)
	fl.started.Add(1)
	fl.mu.Unlock()
}

// nextFile returns the file after last.cur in a listing if last.before,
// last.prev and last.cur are the files before it, in order; at the
// listing's start the opens before its first file are "" (none).
// Directories do not count (and may sit out of order between a listing's
// pages, files never do).
func nextFile(l *metadata.Listing, last lastOpens) (name string, obj bucket.Object, ok bool) {
	i, found := l.Index(last.cur)
	if !found || !l.IsFile(i) {
		return "", bucket.Object{}, false
	}
	// fileBefore is the index of the last file before entry j, or -1.
	fileBefore := func(j int) int {
		for j--; j >= 0 && !l.IsFile(j); j-- {
		}
		return j
	}
	var p2, p1 string // the two files before it
	if j := fileBefore(i); j >= 0 {
		p1 = l.Name(j)
		if j = fileBefore(j); j >= 0 {
			p2 = l.Name(j)
		}
	}
	if p1 != last.prev || p2 != last.before {
		return "", bucket.Object{}, false
	}
	for j := i + 1; j < l.Len(); j++ {
		if l.IsFile(j) {
			return l.Entry(j)
		}
	}
	return "", bucket.Object{}, false
}

// readOnFromStart is called once a handle of path, a large file, has been
// read from its start to aheadListAfter. If path is the first file opened
// in its directory and the directory has no fresh listing, one is started
// in the background: should the reader go on to the end of the file, the
// listing says by then which file comes next (atEnd). Started at the end,
// it would come a round trip too late for the first file boundary. It
// reports busy if the listing budget was busy: worth a later try.
func (fl *Files) readOnFromStart(path string) (busy bool) {
	dir, name := metadata.SplitPath(path)
	fl.mu.Lock()
	last := fl.opens[dir]
	fl.mu.Unlock()
	if last.cur != name || last.prev != "" {
		return false
	}
	if _, ok := fl.dirs.Listing(dir); ok {
		return false
	}
	return fl.dirs.ListSoon(dir)
}

// indexLocked returns the index in fl.pending of the file of path, or -1.
// LOCKS_REQUIRED(fl.mu)
func (fl *Files) indexLocked(path string) int {
	return slices.IndexFunc(fl.pending, func(p *aheadFile) bool { return p.path == path })
}

// removeLocked takes fl.pending[i] out of the waiting files and stops its
// timer. LOCKS_REQUIRED(fl.mu)
func (fl *Files) removeLocked(i int) *aheadFile {
	p := fl.pending[i]
	fl.pending = slices.Delete(fl.pending, i, i+1)
	p.timer.Stop()
	if p.small {
		fl.smallFiles--
	}
	return p
}

// largeLocked counts the waiting files opened at the end of another (not
// small ones). LOCKS_REQUIRED(fl.mu)
func (fl *Files) largeLocked() int {
	n := 0
	for _, p := range fl.pending {
		if !p.small {
			n++
		}
	}
	return n
}

// addLocked makes p wait for its reader, for at most fl.wait. A small
// file's place (smallFiles) must have been taken already.
// LOCKS_REQUIRED(fl.mu)
func (fl *Files) addLocked(p *aheadFile) {
	p.timer = time.AfterFunc(fl.wait, func() { fl.expire(p) })
	fl.pending = append(fl.pending, p)
}

// evictStaleLocked closes the oldest waiting large file whose directory's
// reader has moved on to another file (stopped, or skipped it), so that
// it does not hold a place for the rest of its wait. It reports whether
// it did. LOCKS_REQUIRED(fl.mu)
func (fl *Files) evictStaleLocked() bool {
	return fl.evictFirstLocked(func(p *aheadFile) bool {
		dir, _ := metadata.SplitPath(p.path)
		return !p.small && fl.opens[dir].cur != p.after
	})
}

// evictFirstLocked closes the oldest waiting file for which stale is
// true, counting it unused. It reports whether there was one.
// LOCKS_REQUIRED(fl.mu)
func (fl *Files) evictFirstLocked(stale func(p *aheadFile) bool) bool {
	for i, p := range fl.pending {
		if stale(p) {
			fl.removeLocked(i)
			fl.unused.Add(1)
			go p.r.Close()
			return true
		}
	}
	return false
}

// release is called when a handle whose reader was taken from the files
// opened ahead (p, as take returned it) ends. If the reader was never
// read (the open was a probe: a stat through open, a check for
// existence), it waits again for the next open, instead of what it
// fetched being thrown away. It reports whether it kept the reader; if
// not, the caller closes it.
func (fl *Files) release(p *aheadFile) bool {
	dir, name := metadata.SplitPath(p.path)
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.unchargeLocked(p)
	if !p.r.Unread() {
		return false
	}
	if fl.closed || fl.indexLocked(p.path) >= 0 || fl.opening[p.path] || fl.held[p.path] > 0 {
		return false
	}
	q := &aheadFile{path: p.path, obj: p.obj, r: p.r, small: p.small, idx: p.idx, gen: p.gen}
	if q.small {
		if !fl.smallRoomLocked() {
			return false
		}
		fl.smallFiles++
	} else {
		if fl.largeLocked() >= aheadMax {
			return false
		}
		q.after = name // due while the directory's last open is this file
		if fl.opens[dir].cur != name {
			q.after = "" // the reader moved on: stale at once if a place is needed
		}
	}
	fl.addLocked(q)
	fl.taken.Add(^uint64(0)) // not taken after all: counted when it is
	return true
}

// expire closes p if nobody has opened it.
func (fl *Files) expire(p *aheadFile) {
	fl.mu.Lock()
	i := fl.indexLocked(p.path)
	if i < 0 || fl.pending[i] != p {
		fl.mu.Unlock()
		return
	}
	fl.removeLocked(i)
	fl.mu.Unlock()
	fl.unused.Add(1)
	p.r.Close()
}

// OpenedAhead reports whether the file at path is opened ahead in obj's
// version and no open has taken it yet (for `ferry warm --check`: its
// bytes are being fetched, or were, for a reader expected soon). A file
// being opened ahead is waited for, as an open does: opening ahead does
// no store I/O, and it may yet give the file up (the disk cache holds it
// whole, or there is nothing to fetch).
func (fl *Files) OpenedAhead(path string, obj bucket.Object) bool {
	if !fl.on {
		return false
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	for fl.opening[path] {
		fl.opened.Wait()
	}
	i := fl.indexLocked(path)
	return i >= 0 && fl.pending[i].obj.SameVersion(&obj)
}

// Forget closes the files opened ahead at or under p ("" for all): an
// invalidation forgets them, so that the next open fetches again (after
// `ferry invalidate --data`, through the disk cache, which a waiting
// file's bytes would otherwise bypass). It returns how many it closed.
func (fl *Files) Forget(p string) int {
	fl.mu.Lock()
	var drop []*aheadFile
	for i := len(fl.pending) - 1; i >= 0; i-- {
		if metadata.Under(fl.pending[i].path, p) {
			drop = append(drop, fl.removeLocked(i))
		}
	}
	fl.mu.Unlock()
	for _, f := range drop {
		f.r.Close()
	}
	return len(drop)
}

// Close closes every file opened ahead; nothing is opened ahead after it.
// Readers handed out stay the callers' to close.
func (fl *Files) Close() {
	fl.mu.Lock()
	fl.closed = true
	pending := slices.Clone(fl.pending)
	for len(fl.pending) > 0 {
		fl.removeLocked(len(fl.pending) - 1)
	}
	fl.mu.Unlock()
	for _, p := range pending {
		p.r.Close()
	}
}

// States of file.fromStart.
const (
	startUnseen int32 = iota // no read at offset 0 yet
	startSeen                // read at offset 0, not yet at aheadListAfter
	startListed              // read on: readOnFromStart has run
)

// file is the Reader of one handle that Files opened: the Content's
// reader, and what reading ahead across files needs to know of the
// handle.
type file struct {
	Reader
	fl    *Files
	path  string
	obj   bucket.Object
	ahead *aheadFile // what the reader was opened ahead as, or nil
	// read is set by the handle's first read.
	read atomic.Bool
	// fromStart: has a large file been read at offset 0, and then in the
	// band after aheadListAfter (startUnseen, startSeen, startListed).
	fromStart atomic.Int32
}

var _ Reader = (*file)(nil)

func (f *file) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	f.noteRead(off)
	return f.Reader.ReadAt(ctx, p, off)
}

// Spliceable notes the read only if it hands the bytes out: otherwise
// the caller reads them with ReadAt, which notes it.
func (f *file) Spliceable(off int64, size int) (*os.File, int, func(), bool) {
	file, n, release, ok := f.Reader.Spliceable(off, size)
	if ok {
		f.noteRead(off)
	}
	return file, n, release, ok
}

// Close ends the handle: a reader taken from the files opened ahead and
// never read waits again for the next open (release); any other is
// closed.
func (f *file) Close() {
	f.fl.handleReleased(f.path)
	if f.ahead != nil && f.fl.release(f.ahead) {
		return
	}
	f.Reader.Close()
}

// noteRead is called for every read of the handle, at off: the first
// uncharges a small file opened ahead (its memory is now the reader's),
// and a large file's reads tell whether it is read on from its start.
// Once it has been read at offset 0 and then within aheadListBand after
// aheadListAfter, readOnFromStart runs, again at the next such read if
// that found the listing budget busy. (A read in the band that arrives
// before any read at 0 does not count; a reader going on from the start
// makes several reads in the band, and the later ones come after it.)
func (f *file) noteRead(off int64) {
	if !f.read.Load() && !f.read.Swap(true) && f.ahead != nil {
		f.fl.firstRead(f.ahead)
	}
	if f.obj.Size < aheadMinSize {
		return
	}
	switch {
	case off == 0:
		f.fromStart.CompareAndSwap(startUnseen, startSeen)
	case off >= aheadListAfter && off < aheadListAfter+aheadListBand &&
		f.fromStart.Load() == startSeen && f.fromStart.CompareAndSwap(startSeen, startListed):
		if f.fl.readOnFromStart(f.path) {
			f.fromStart.Store(startSeen)
		}
	}
}
