package readahead

import (
	"slices"

	"ferry/bucket"
	"ferry/metadata"
)

// Reading ahead of small files. A loader reading a directory of small
// files with N workers has N files in flight, each one round trip plus its
// transfer away: N files per round trip, however much more the link could
// carry. Measured on the emulated link (30 ms, 8 readers of 128 KiB
// files), that is 26-30 MiB/s of a 477 MiB/s link, for ferry and for the
// store's own client alike.
//
// So when a directory's opens follow its listing (a run: each open falls
// near the furthest one so far, and the run has opened most of the
// entries up to it), the small files after the furthest one opened are
// fetched whole ahead, one request each, up to smallAhead entries past
// it, and the readers' opens take them over as for large files
// (files.go). A reader in shuffled order rarely makes a run: 20 shuffled
// epochs through directories of 60 to 3000 files (5 each) fetched 24
// files ahead in all (a unit-test probe), 22 of them read later in the
// same epoch.
//
// Bounds: smallAheadMax files wait for readers, all directories together
// (a new file is dropped when they are reached, unless a waiting one is
// stale: its run was forgotten, or went on smallSpan files past it); each
// waits at most aheadUnused. Their bytes are in the one memory budget:
// like all readahead, fetching them takes only free memory, and never
// what another file opened ahead holds (Fetcher.OpenAhead), so they do
// not push one another out, while streams being read may take theirs. A
// small file taken by an open stays counted until its first read (a probe
// releases it unread, and it waits again). Not fetched: a file a reader
// has open now, one the disk cache holds whole, and one read before
// through this mount on an inode the kernel still has (ReadBefore): the
// kernel may still have its pages, and ferry cannot tell. So a second
// pass on the same mount is read ahead only where the kernel forgot the
// inodes or the files changed; later epochs are what the disk cache is
// for. (Inferring the page cache from whether reads come through opens
// that kept it was tried; three reviews found it fetching whole cached
// epochs for nobody, and a disk cache that stores nothing, its volume
// full, would have done the same.)
//
// A directory has up to smallRunsPerDir runs: several readers, each
// through its own part of a directory. An open extends the nearest run
// whose furthest open is at most smallSpan away, live runs first (a stale
// run met on the way does not take over), else starts a new run; back
// at or before the run's first open, at most smallBehind behind its
// furthest (so that a second epoch through a small directory is a new
// run). An open of a file among the run's last recentOpens is no step: a
// probe then a read, or several workers opening one index file.
//
// Without a fresh listing nothing is fetched ahead; a loader that opens
// files by name without listing makes lookup misses, and three of those
// list the directory (package metadata).
const (
	// smallSpan: an open at most this many listing entries before or after
	// the furthest one of a run continues it; further away, a new run
	// begins. smallBehind replaces it for an open at or before the run's
	// first: a second pass through a small directory is a new run.
	smallSpan   = 32
	smallBehind = 16
	// liveOpens: a run extended within the directory's last liveOpens
	// opens is live, and preferred (readers in up to smallRunsPerDir
	// parts of a directory extend each of their runs every few opens).
	liveOpens = 16
	// smallRunMin opens make a run, if they cover at least 3/4 of the
	// listing entries in the run's range.
	smallRunMin = 4
	// smallAhead: files are fetched ahead up to this many listing entries
	// past the furthest open of the run. (bench's small files, 8 readers
	// of 128 KiB: 8 gave 150% of 8 readers at one round trip, 16 gave
	// 207-209%, 32 gave 211%.)
	smallAhead = 16
	// smallAheadMax bounds the small files opened ahead and not yet
	// taken.
	smallAheadMax = 64
	// smallRunsPerDir bounds the runs of one directory; recentOpens is how
	// many of a run's last opens are remembered.
	smallRunsPerDir = 8
	recentOpens     = 16
)

// smallRun is one run of opens in a directory: lo and hi are the listing
// indices of the first and the furthest file opened in it, n how many
// opens it had, ahead the furthest index fetched ahead, gen the run's
// number, last the value of dirRuns.opens when it was last extended, and
// recent its last opens (a ring; -1 is empty).
type smallRun struct {
	lo, hi, n, ahead int
	gen, last        uint64
	recent           [recentOpens]int
	next             int
}

func newSmallRun(i int, gen uint64) smallRun {
	r := smallRun{lo: i, hi: i, n: 1, ahead: i, gen: gen}
	for k := range r.recent {
		r.recent[k] = -1
	}
	r.recent[0], r.next = i, 1
	return r
}

// step records an open of index i.
func (r *smallRun) step(i int) {
	r.lo, r.hi, r.n = min(r.lo, i), max(r.hi, i), r.n+1
	r.recent[r.next] = i
	r.next = (r.next + 1) % recentOpens
}

// inOrder reports whether the run's opens follow the listing: enough of
// them, covering most of its range.
func (r *smallRun) inOrder() bool {
	return r.n >= smallRunMin && 4*r.n >= 3*(r.hi-r.lo+1)
}

// dirRuns is what a directory's opens of small files were.
type dirRuns struct {
	runs  []smallRun // least recently extended first
	opens uint64     // opens of small files in the directory so far
}

// run returns the run that an open of index i extends, or a new one
// (replacing the least recently extended), made the most recently
// extended. The open extends the nearest run whose furthest open is at
// most smallSpan away (the most recently extended of equals), preferring
// runs extended within the directory's last liveOpens opens, so that a
// stale run left behind by a few late opens does not take over a later
// pass on the way. An open at or before the run's first open may be at
// most smallBehind behind its furthest: further back, a new pass has
// begun (a second epoch). An open of one of the run's last recentOpens
// files is no step. gen numbers a new run.
func (d *dirRuns) run(i int, gen func() uint64) *smallRun {
	d.opens++
	k, kLive, best := -1, false, 0
	for j := len(d.runs) - 1; j >= 0; j-- { // the most recent first: it wins ties
		r := &d.runs[j]
		if i > r.hi+smallSpan || i < r.hi-smallSpan || (i <= r.lo && r.hi-i > smallBehind) {
			continue
		}
		dist := max(r.hi-i, i-r.hi)
		live := d.opens-r.last <= liveOpens
		if k >= 0 && (kLive && !live || kLive == live && dist >= best) {
			continue
		}
		k, kLive, best = j, live, dist
	}
	var r smallRun
	if k >= 0 {
		r = d.runs[k]
		if !slices.Contains(r.recent[:], i) { // else a repeated open: no step
			r.step(i)
		}
		d.runs = slices.Delete(d.runs, k, k+1)
	} else {
		r = newSmallRun(i, gen())
		if len(d.runs) >= smallRunsPerDir {
			d.runs = slices.Delete(d.runs, 0, 1)
		}
	}
	r.last = d.opens
	d.runs = append(d.runs, r)
	return &d.runs[len(d.runs)-1]
}

// openedSmall is called for every open of a file smaller than aheadMinSize
// (whose reader is not read ahead in windows): it extends a run of the
// directory and, if that run follows the listing, opens the small files
// after it ahead.
func (fl *Files) openedSmall(path string, obj bucket.Object) {
	if obj.Size >= aheadMinSize {
		return
	}
	dir, name := metadata.SplitPath(path)
	listing, ok := fl.dirs.Listing(dir)
	if !ok {
		return
	}
	i, ok := listing.Index(name)
	if !ok {
		return
	}
	for _, p := range fl.smallAhead(dir, listing, i) {
		fl.openSmallAhead(p)
	}
}

// smallAhead extends the run of dir that an open of listing entry i
// continues and, if the run follows the listing, books the small files
// to open ahead after it (their places taken, their paths marked
// opening).
func (fl *Files) smallAhead(dir string, listing *metadata.Listing, i int) []*aheadFile {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.closed {
		return nil
	}
	r := fl.dirRunsLocked(dir).run(i, func() uint64 { fl.gen++; return fl.gen })
	if !r.inOrder() {
		return nil
	}
	var todo []*aheadFile
	for j := max(r.ahead, r.hi) + 1; j < listing.Len() && j <= r.hi+smallAhead; j++ {
		name, obj, isFile := listing.Entry(j)
		p := metadata.ChildPath(dir, name)
		if !isFile || obj.Size == 0 || obj.Size >= aheadMinSize ||
			fl.opening[p] || fl.held[p] > 0 || fl.waitingLocked(p, obj) ||
			fl.dirs.ReadBefore(p, obj) {
			r.ahead = j
			continue
		}
		if !fl.makeSmallRoomLocked() {
			break // tried again at the run's next open
		}
		r.ahead = j
		fl.opening[p] = true
		fl.smallFiles++
		todo = append(todo, &aheadFile{path: p, obj: obj, small: true, idx: j, gen: r.gen})
	}
	return todo
}

// openSmallAhead opens p, booked by smallAhead, outside the lock. Opening
// ahead only starts fetches (with a disk cache it looks up which blocks
// it holds); an open of the file meanwhile waits for it (see take).
func (fl *Files) openSmallAhead(p *aheadFile) {
	fl.mu.Lock()
	closed := fl.closed
	fl.mu.Unlock()
	// Stopped: given up unopened. In the disk cache whole: not worth a
	// handle.
	skip := closed || fl.content.Cached(p.obj)
	if !skip {
		p.r = fl.content.OpenAhead(p.obj)
	}
	fl.mu.Lock()
	fl.doneOpeningLocked(p.path)
	drop := fl.closed || skip || !p.r.Unread() // stopped, cached, or nothing to fetch
	if drop {
		fl.smallFiles--
	} else {
		fl.addLocked(p)
		fl.started.Add(1)
	}
	fl.mu.Unlock()
	if drop && p.r != nil {
		p.r.Close()
	}
}

// dirRunsLocked returns the runs of dir, made if need be.
// LOCKS_REQUIRED(fl.mu)
func (fl *Files) dirRunsLocked(dir string) *dirRuns {
	d, ok := fl.runs[dir]
	if !ok {
		if len(fl.runs) >= dirsTracked {
			clear(fl.runs)
		}
		d = &dirRuns{}
		fl.runs[dir] = d
	}
	return d
}

// waitingLocked reports whether path waits for its reader, opened ahead
// in obj's version; one waiting in another version is closed (the listing
// has a newer one). LOCKS_REQUIRED(fl.mu)
func (fl *Files) waitingLocked(path string, obj bucket.Object) bool {
	i := fl.indexLocked(path)
	if i < 0 {
		return false
	}
	if p := fl.pending[i]; p.obj.SameVersion(&obj) {
		return true
	}
	p := fl.removeLocked(i)
	fl.unused.Add(1)
	go p.r.Close()
	return false
}

// firstRead is called at the first read of a handle whose reader was
// taken from the files opened ahead (p): a small file stops counting
// against the bound, which is for files waiting or about to be read
// (see take; its memory is now the reader's, reclaimable like any).
func (fl *Files) firstRead(p *aheadFile) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.unchargeLocked(p)
}

// unchargeLocked ends the counting of small file p taken by an open, if
// it is still counted. LOCKS_REQUIRED(fl.mu)
func (fl *Files) unchargeLocked(p *aheadFile) {
	if p.charged {
		p.charged = false
		fl.smallFiles--
	}
}

// smallRoomLocked reports whether a small file may wait for its reader
// now. LOCKS_REQUIRED(fl.mu)
func (fl *Files) smallRoomLocked() bool {
	return fl.smallFiles < fl.maxSmall
}

// makeSmallRoomLocked reports whether a small file may wait for its
// reader now, closing stale waiting ones to make room.
// LOCKS_REQUIRED(fl.mu)
func (fl *Files) makeSmallRoomLocked() bool {
	for !fl.smallRoomLocked() {
		if !fl.evictSmallLocked() {
			return false
		}
	}
	return true
}

// evictSmallLocked closes the oldest small file waiting for a reader that
// will not come (staleSmallLocked). It reports whether it did.
// LOCKS_REQUIRED(fl.mu)
func (fl *Files) evictSmallLocked() bool {
	return fl.evictFirstLocked(func(p *aheadFile) bool { return p.small && fl.staleSmallLocked(p) })
}

// staleSmallLocked reports whether small file p waits for a reader that
// will not come: the run it was opened for was forgotten (replaced by
// newer runs of its directory), or went on smallSpan entries past it.
// LOCKS_REQUIRED(fl.mu)
func (fl *Files) staleSmallLocked(p *aheadFile) bool {
	dir, _ := metadata.SplitPath(p.path)
	if d, ok := fl.runs[dir]; ok {
		for _, r := range d.runs {
			if r.gen == p.gen {
				return r.hi > p.idx+smallSpan
			}
		}
	}
	return true
}
