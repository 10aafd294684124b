package fs

import (
	"slices"

	"ferry/bucket"
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
// (ahead.go). A reader in shuffled order rarely makes a run: 20 shuffled
// epochs through directories of 60 to 3000 files fetched 2 files ahead
// in all (a unit-test probe), and those are files the epoch reads anyway.
//
// Bounds: smallAheadMax files and Config.AheadBytes bytes (at most
// smallAheadBytes) wait for readers, all directories together (a new file
// is dropped when they are reached, unless a waiting one is stale: its
// run ended, or the readers went on smallSpan files past it); each waits
// at most aheadUnused; like all readahead, fetching takes only free
// memory. A small file taken by an open stays counted until its handle is
// released: its memory is in use until then. Not fetched: a file a
// reader has open now, one read since the run began (another reader got
// there first), and one read before whose pages the kernel may still
// have, unless the latest open in its directory that kept the kernel's
// page cache was read through ferry all the same (pagesKept: the kernel
// drops pages under memory pressure, so a second epoch of a dataset
// larger than memory finds none).
//
// A directory has up to smallRunsPerDir runs: several readers, each
// through its own part of a directory. An open extends the nearest run
// whose furthest open is at most smallSpan away, live runs first (a stale
// run met on the way does not take over); an open of a file read in the
// directory's current pass begins a new pass (a second epoch), and a new
// run. An open of a file among the run's last recentOpens is no step: a
// probe then a read, or several workers opening one index file.
//
// Without a fresh listing nothing is fetched ahead; a loader that opens
// files by name without listing makes lookup misses, and three of those
// list the directory (prefetch.go).
const (
	// smallSpan: an open at most this many listing entries before or after
	// the furthest one of a run continues it; further away, a new run
	// begins.
	smallSpan = 32
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
	// smallAheadMax and smallAheadBytes bound the small files opened ahead
	// and not yet taken.
	smallAheadMax   = 64
	smallAheadBytes = 64 << 20
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
	// pagesGone: the directory's pagesGone was seen during the run. It
	// stays: a loader that probes each file before reading it gives
	// both answers in turn.
	pagesGone bool
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
	// passStart is fileSystem.reads when the directory's current pass
	// began: the first open of a file read in the pass before begins the
	// next one. Files read since are not fetched ahead: a reader who
	// stalled while the others went on would otherwise fetch again what
	// they read.
	passStart uint64
	// pagesGone: the latest open in the directory that kept the kernel's
	// page cache of a file read before was read through ferry all the
	// same.
	pagesGone bool
}

// run returns the run that an open of index i extends, or a new one
// (replacing the least recently extended), made the most recently
// extended. The open extends the nearest run whose furthest open is at
// most smallSpan away (the most recently extended of equals), preferring
// runs extended within the directory's last liveOpens opens, so that a
// stale run left behind by a few late opens does not take over a later
// pass on the way. A file read since the directory's pass began (read:
// when it was last read, see fileSystem.lastRead) begins a new pass, and
// a new run; an open of one of the run's last recentOpens files is no
// step. gen numbers a new run, now is fileSystem.reads.
func (d *dirRuns) run(i int, read uint64, gen func() uint64, now uint64) *smallRun {
	d.opens++
	k, kLive, best := -1, false, 0
	for j := len(d.runs) - 1; j >= 0; j-- { // the most recent first: it wins ties
		r := &d.runs[j]
		dist := max(r.hi-i, i-r.hi)
		live := d.opens-r.last <= liveOpens
		if dist > smallSpan || (k >= 0 && (kLive && !live || kLive == live && dist >= best)) {
			continue
		}
		k, kLive, best = j, live, dist
	}
	var r smallRun
	switch {
	case k >= 0 && slices.Contains(d.runs[k].recent[:], i):
		r = d.runs[k] // a repeated open: no step
		d.runs = slices.Delete(d.runs, k, k+1)
	case read > d.passStart:
		d.passStart = now
		k = -1
	case k >= 0:
		r = d.runs[k]
		r.step(i)
		d.runs = slices.Delete(d.runs, k, k+1)
	}
	if k < 0 {
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
func (a *aheader) openedSmall(path string, obj bucket.Object) {
	if a.openAhead == nil || obj.Size >= aheadMinSize {
		return
	}
	dir, name := splitPath(path)
	entries, i, ok := a.fs.cache.listingAt(dir, name)
	if !ok {
		return
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	d := a.dirRunsLocked(dir)
	r := d.run(i, a.fs.lastRead(path, obj), func() uint64 { a.gen++; return a.gen }, a.fs.reads.Load())
	r.pagesGone = r.pagesGone || d.pagesGone
	var todo []*aheadFile
	if r.inOrder() {
		for j := max(r.ahead, r.hi) + 1; j < len(entries) && j <= r.hi+smallAhead; j++ {
			e := entries[j]
			p := childPath(dir, e.name)
			if e.kind != kindFile || e.obj.Size == 0 || e.obj.Size >= aheadMinSize ||
				a.opening[p] || a.held[p] > 0 || a.indexLocked(p) >= 0 {
				r.ahead = j
				continue
			}
			if seq := a.fs.lastRead(p, e.obj); seq > d.passStart || (seq > 0 && !r.pagesGone) {
				r.ahead = j // read in this pass, or the kernel may have it
				continue
			}
			if !a.makeSmallRoomLocked(int64(e.obj.Size)) {
				break // tried again at the run's next open
			}
			r.ahead = j
			a.opening[p] = true
			a.smallFiles++
			a.smallBytes += int64(e.obj.Size)
			todo = append(todo, &aheadFile{path: p, obj: e.obj, small: true, idx: j, gen: r.gen})
		}
	}
	a.mu.Unlock()
	if len(todo) == 0 {
		return
	}
	// Opened outside the lock. Opening ahead only starts fetches (with a
	// disk cache it looks up which blocks it holds); an open of one of
	// these files meanwhile waits for it (see open).
	for k, p := range todo {
		a.mu.Lock()
		closed := a.closed
		a.mu.Unlock()
		if !closed {
			p.r = a.openAhead(p.obj)
		}
		a.mu.Lock()
		a.doneOpeningLocked(p.path)
		drop := a.closed || !fetching(p.r) // stopped, or nothing to fetch
		if drop {
			a.smallFiles--
			a.smallBytes -= int64(p.obj.Size)
		} else {
			a.addLocked(p)
			a.started.Add(1)
		}
		a.mu.Unlock()
		if drop && p.r != nil {
			p.r.Close()
		}
		if closed {
			// Stopped: the rest are given up without being opened.
			a.mu.Lock()
			for _, q := range todo[k+1:] {
				a.doneOpeningLocked(q.path)
				a.smallFiles--
				a.smallBytes -= int64(q.obj.Size)
			}
			a.mu.Unlock()
			return
		}
	}
}

// dirRunsLocked returns the runs of dir, made if need be.
// LOCKS_REQUIRED(a.mu)
func (a *aheader) dirRunsLocked(dir string) *dirRuns {
	d, ok := a.runs[dir]
	if !ok {
		if len(a.runs) >= dirsTracked {
			clear(a.runs)
		}
		d = &dirRuns{}
		a.runs[dir] = d
	}
	return d
}

// pagesKept is called when a handle whose open kept the kernel's page
// cache of a file read before is released without a read (kept: the
// kernel had the pages), or is read (not kept: it had dropped them). The
// latest says whether the directory's files read before are fetched
// ahead.
func (a *aheader) pagesKept(path string, kept bool) {
	if a.openAhead == nil {
		return
	}
	dir, _ := splitPath(path)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dirRunsLocked(dir).pagesGone = !kept
}

// smallRoomLocked reports whether a small file of size bytes may wait for
// its reader now. LOCKS_REQUIRED(a.mu)
func (a *aheader) smallRoomLocked(size int64) bool {
	return a.smallFiles < smallAheadMax && a.smallBytes+size <= a.maxBytes
}

// makeSmallRoomLocked reports whether a small file of size bytes may wait
// for its reader now, closing stale waiting ones to make room.
// LOCKS_REQUIRED(a.mu)
func (a *aheader) makeSmallRoomLocked(size int64) bool {
	for !a.smallRoomLocked(size) {
		if !a.evictSmallLocked() {
			return false
		}
	}
	return true
}

// evictSmallLocked closes the oldest small file waiting for a reader that
// will not come: its directory's run ended (a new one began), or went on
// smallSpan entries past it. It reports whether it did.
// LOCKS_REQUIRED(a.mu)
func (a *aheader) evictSmallLocked() bool {
	for i, p := range a.pending {
		if !p.small {
			continue
		}
		if a.staleSmallLocked(p) {
			a.removeLocked(i)
			a.unused.Add(1)
			go p.r.Close()
			return true
		}
	}
	return false
}

// staleSmallLocked reports whether small file p waits for a reader that
// will not come: the run it was opened for ended, or went on smallSpan
// entries past it. LOCKS_REQUIRED(a.mu)
func (a *aheader) staleSmallLocked(p *aheadFile) bool {
	dir, _ := splitPath(p.path)
	if d, ok := a.runs[dir]; ok {
		for _, r := range d.runs {
			if r.gen == p.gen {
				return r.hi > p.idx+smallSpan
			}
		}
	}
	return true
}
