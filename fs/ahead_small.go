package fs

import "ferry/bucket"

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
// Bounds: smallAheadMax files and smallAheadBytes bytes wait for readers,
// all directories together (a new file is dropped when they are reached,
// unless a waiting one is stale: its run ended, or the readers went on
// smallSpan files past it); each waits at most aheadUnused; like all
// readahead, fetching takes only free memory. A file the kernel may still
// have in its page cache is not fetched (pageCached).
const (
	// smallSpan: an open at most this many listing entries outside the
	// range a run has opened continues it; further away, a new run begins.
	smallSpan = 32
	// smallRunMin opens make a run, if they cover at least 3/4 of the
	// listing entries in the run's range.
	smallRunMin = 4
	// smallAhead: files are fetched ahead up to this many listing entries
	// past the furthest open of the run.
	smallAhead = 16
	// smallAheadMax and smallAheadBytes bound the small files opened ahead
	// and not yet taken.
	smallAheadMax   = 64
	smallAheadBytes = 64 << 20
)

// smallRun is a directory's current run of opens: lo and hi are the
// listing indices of the first and the furthest file opened in it, n how
// many opens it had, ahead the furthest index fetched ahead, and gen the
// run's number.
type smallRun struct {
	lo, hi, n, ahead int
	gen              uint64
}

// inOrder reports whether the run's opens follow the listing.
func (r smallRun) inOrder() bool {
	return r.n >= smallRunMin && 4*r.n >= 3*(r.hi-r.lo+1)
}

// openedSmall is called for every open of a file smaller than aheadMinSize
// (whose reader is not read ahead in windows): it extends the directory's
// run and, if the run follows the listing, opens the small files after it
// ahead.
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
	if len(a.runs) >= dirsTracked {
		clear(a.runs)
	}
	r, ok := a.runs[dir]
	if ok && i >= r.lo-smallSpan && i <= r.hi+smallSpan {
		r.lo, r.hi, r.n = min(r.lo, i), max(r.hi, i), r.n+1
	} else {
		a.gen++
		r = smallRun{lo: i, hi: i, n: 1, ahead: i, gen: a.gen}
	}
	var todo []*aheadFile
	if r.inOrder() {
		for j := max(r.ahead, r.hi) + 1; j < len(entries) && j <= r.hi+smallAhead; j++ {
			e := entries[j]
			p := childPath(dir, e.name)
			if e.kind != kindFile || e.obj.Size == 0 || e.obj.Size >= aheadMinSize ||
				a.opening[p] || a.indexLocked(p) >= 0 || a.fs.pageCached(p, e.obj) {
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
	a.runs[dir] = r
	a.mu.Unlock()
	if len(todo) == 0 {
		return
	}
	// Opened outside the lock (it starts fetches, no I/O); an open of one
	// of these files meanwhile waits for it (see open).
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

// smallRoomLocked reports whether a small file of size bytes may wait for
// its reader now. LOCKS_REQUIRED(a.mu)
func (a *aheader) smallRoomLocked(size int64) bool {
	return a.smallFiles < smallAheadMax && a.smallBytes+size <= smallAheadBytes
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
		dir, _ := splitPath(p.path)
		if r := a.runs[dir]; r.gen != p.gen || r.hi > p.idx+smallSpan {
			a.removeLocked(i)
			a.unused.Add(1)
			go p.r.Close()
			return true
		}
	}
	return false
}
