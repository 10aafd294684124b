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
// near the range opened so far, and the run has opened most of its range),
// the small files after the furthest one opened are fetched whole ahead,
// one request each, up to smallAhead files past it, and the readers' opens
// take them over as for large files (ahead.go). A reader in shuffled order
// of a large directory never makes a run; of a small directory it may,
// and then fetches ahead files its epoch reads anyway.
//
// Bounds: smallAheadMax files and Config.AheadBytes bytes (at most
// smallAheadBytes) wait for readers, all directories together (a new file
// is dropped when they are reached, unless a waiting one is stale: its
// run ended, or the readers went on smallSpan files past it); each waits
// at most aheadUnused; like all readahead, fetching takes only free
// memory. A file a reader has open now is not fetched, nor one the kernel
// may still have in its page cache (pageCached), unless files of that
// directory the kernel was expected to have were read from ferry after
// all (pageMiss: the pages were dropped).
//
// A directory has up to smallRunsPerDir runs, each open extending the
// nearest: several readers, each through its own part of a directory.
// An open of a file among the run's last recentOpens is no step: a probe
// then a read, or several workers opening one index file.
//
// Without a fresh listing nothing is fetched ahead; a loader that opens
// files by name without listing makes lookup misses, and three of those
// list the directory (prefetch.go).
const (
	// smallSpan: an open at most this many listing entries before or after
	// the furthest one of a run continues it; further away, a new run
	// begins.
	smallSpan = 32
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
	smallRunsPerDir = 4
	recentOpens     = 16
)

// smallRun is one run of opens in a directory: lo and hi are the listing
// indices of the first and the furthest file opened in it, n how many
// opens it had, ahead the furthest index fetched ahead, gen the run's
// number, and recent its last opens (a ring; -1 is empty).
type smallRun struct {
	lo, hi, n, ahead int
	gen              uint64
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

// step records an open of index i, unless it is one of the last few.
func (r *smallRun) step(i int) {
	if slices.Contains(r.recent[:], i) {
		return
	}
	r.lo, r.hi, r.n = min(r.lo, i), max(r.hi, i), r.n+1
	r.recent[r.next] = i
	r.next = (r.next + 1) % recentOpens
}

// near reports how far i is from the run's front (its furthest open), or
// -1 if too far for the run to go on: a run is readers moving forward
// together, and an open far behind them (a second epoch) is another.
func (r *smallRun) near(i int) int {
	d := max(r.hi-i, i-r.hi)
	if d > smallSpan {
		return -1
	}
	return d
}

// inOrder reports whether the run's opens follow the listing: enough of
// them, covering most of its range.
func (r *smallRun) inOrder() bool {
	return r.n >= smallRunMin && 4*r.n >= 3*(r.hi-r.lo+1)
}

// dirRuns is what a directory's opens of small files were.
type dirRuns struct {
	runs []smallRun // least recently extended first
	// pagesGone: a file opened with the kernel's page cache kept was read
	// from ferry all the same.
	pagesGone bool
}

// run returns the run that an open of index i extends, the nearest one
// within smallSpan, or a new one (replacing the least recently extended),
// and makes it the most recently extended.
func (d *dirRuns) run(i int, gen func() uint64) *smallRun {
	k, best := -1, 0
	for j := range d.runs {
		if n := d.runs[j].near(i); n >= 0 && (k < 0 || n < best) {
			k, best = j, n
		}
	}
	var r smallRun
	if k >= 0 {
		r = d.runs[k]
		r.step(i)
		d.runs = slices.Delete(d.runs, k, k+1)
	} else {
		r = newSmallRun(i, gen())
		if len(d.runs) >= smallRunsPerDir {
			d.runs = slices.Delete(d.runs, 0, 1)
		}
	}
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
	r := d.run(i, func() uint64 { a.gen++; return a.gen })
	var todo []*aheadFile
	if r.inOrder() {
		for j := max(r.ahead, r.hi) + 1; j < len(entries) && j <= r.hi+smallAhead; j++ {
			e := entries[j]
			p := childPath(dir, e.name)
			if e.kind != kindFile || e.obj.Size == 0 || e.obj.Size >= aheadMinSize ||
				a.opening[p] || a.held[p] > 0 || a.indexLocked(p) >= 0 ||
				(!d.pagesGone && a.fs.pageCached(p, e.obj)) {
				r.ahead = j
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
	for _, p := range todo {
		p.r = a.openAhead(p.obj)
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
		if drop {
			p.r.Close()
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

// pageMiss is called when a file opened with the kernel's page cache kept
// is read all the same: the kernel has dropped its pages, and its
// directory's files are fetched ahead from now on whatever pageCached
// says.
func (a *aheader) pageMiss(path string) {
	if a.openAhead == nil {
		return
	}
	dir, _ := splitPath(path)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dirRunsLocked(dir).pagesGone = true
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
