package filecache

import (
	"errors"
	"io/fs"
	"os"
	"time"
)

// makeRoomLocked evicts least recently used entries other than keep until
// need more bytes fit under the limit and above the free-space floor, or
// nothing is left to evict. avail is the volume's free space as last
// measured. It returns the evicted entries that must be finished outside
// the lock, and a test for whether n bytes now fit.
// LOCKS_REQUIRED(s.mu)
func (s *Store) makeRoomLocked(need int64, keep *entry, avail int64) ([]*entry, func(int64) bool) {
	// Evicted bytes count as free at once (pendingFree): the unlink
	// happens outside the lock, maybe later if the file is pinned.
	// A floor of 0 still keeps writes within the free space: with a
	// --cache-size above what the volume has left, a full disk would
	// otherwise fail every write (and index commit) with ENOSPC while
	// nothing is evicted.
	// Files handed out whole (whole.go) are read for as long as they are
	// held: they are not evicted (that would free nothing), and if
	// evicted all the same (Drop) they count until released.
	// Writes in flight to evicted entries count no more than those
	// entries' bytes do: a newcomer evicting another being written (two
	// files fetched at once) must not evict a third for its room.
	fit := func(n int64) bool {
		return s.used+s.heldEvicted+s.reserved-s.reservedEvicted+n <= s.limit &&
			avail+s.pendingFree-s.heldEvicted-s.reserved-n >= s.minFree
	}
	var victims []*entry
	// Cold entries first: each is less recent than every warm one
	// (cold.go).
	for !fit(need) {
		v := s.evictColdLocked()
		if v == nil {
			break
		}
		victims = append(victims, v)
	}
	for el := s.lru.Back(); el != nil && !fit(need); {
		e := el.Value.(*entry)
		el = el.Prev()
		if e == keep || e.holds > 0 {
			continue
		}
		if v := s.evictLocked(e); v != nil {
			victims = append(victims, v)
		}
	}
	return victims, fit
}

// evictLocked removes e from the live set and the index. It returns e if
// nobody has it pinned, and the caller must then call finishEvictions
// after unlocking; otherwise the last unpin does.
// LOCKS_REQUIRED(s.mu)
func (s *Store) evictLocked(e *entry) *entry {
	if !e.live {
		return nil
	}
	e.live = false
	s.lru.Remove(e.elem)
	e.elem = nil
	delete(s.entries, e.key)
	if e.own {
		delete(s.byObj, e.obj)
	}
	delete(s.dirty, e.key)
	s.deleted[e.row] = e.key
	s.deleting[e.key] = &deletion{}
	s.used -= e.bytes
	s.pendingFree += e.bytes
	s.reservedEvicted += e.reserved
	if e.holds > 0 {
		s.heldEvicted += e.bytes
	}
	s.evictions.Add(1)
	if e.unread {
		s.evictedUnreadBytes.Add(e.bytes)
	}
	if e.pins == 0 {
		return e
	}
	return nil
}

// abandonLocked removes a new entry that never got a block, and so has no
// file to delete: unlike an eviction it needs no deletion to complete
// before the key is written again. (If a flush recorded it already, the
// next start drops the record: its file is missing.) LOCKS_REQUIRED(s.mu)
func (s *Store) abandonLocked(e *entry) {
	s.lru.Remove(e.elem)
	delete(s.entries, e.key)
	delete(s.byObj, e.obj)
	delete(s.dirty, e.key)
	// A commit may have written its rows meanwhile: the key's next
	// entry takes another row, so these go.
	s.deleted[e.row] = e.key
	e.live, e.elem = false, nil
}

// unpin drops a pin of e taken by a read that is done with its file,
// and finishes e's eviction if that was the last pin of an evicted
// entry.
func (s *Store) unpin(e *entry) {
	s.mu.Lock()
	var finish *entry
	if s.unpinLocked(e) {
		finish = e
	}
	s.mu.Unlock()
	s.finishEvictions([]*entry{finish})
}

// unpinLocked drops a pin and reports whether the caller must now finish
// the entry's eviction.
// LOCKS_REQUIRED(s.mu)
func (s *Store) unpinLocked(e *entry) bool {
	e.pins--
	return e.pins == 0 && !e.live
}

// finishEvictions closes and unlinks evicted, unpinned entries' files.
func (s *Store) finishEvictions(es []*entry) {
	for _, e := range es {
		if e == nil {
			continue
		}
		s.mu.Lock()
		f := s.detachFileLocked(e)
		s.mu.Unlock()
		f.close()
		if err := os.Remove(s.pathFor(e.key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("cannot remove evicted cache file", "err", err)
		}
		s.mu.Lock()
		if d := s.deleting[e.key]; d != nil {
			d.unlinked = true
			if d.committed {
				delete(s.deleting, e.key)
			}
		}
		s.pendingFree -= e.bytes
		s.mu.Unlock()
	}
}

// touchLocked marks e used: most recently used, unless the insertion
// policy says the use is part of e's own fill (insert.go). Its atime row
// is written again only once the row is atimeGrain away from the use.
// LOCKS_REQUIRED(s.mu)
func (s *Store) touchLocked(e *entry) {
	if s.promotesLocked(e) {
		s.lru.MoveToFront(e.elem)
	}
	e.atime = s.now()
	if d := e.atime - e.savedAtime; !e.atimeDirty && (d >= int64(atimeGrain) || d <= -int64(atimeGrain)) {
		e.atimeDirty = true
		s.dirty[e.key] = e
	}
}

// allocatedLocked sets what e's data file occupies, in the store's count
// too; if the index's atime row (which holds it) says otherwise, the next
// commit writes the row. LOCKS_REQUIRED(s.mu)
func (s *Store) allocatedLocked(e *entry, bytes int64) {
	s.used += bytes - e.bytes
	e.bytes = bytes
	if e.live && bytes != e.savedBytes {
		s.dirty[e.key] = e
	}
}

// atimeGrain is how stale an entry's access time in the index may be.
// Memory keeps the exact LRU order, and a clean Close writes it (the
// snapshot); the atime rows order the entries only when Open has no
// snapshot, after a crash. Written at every use, they cost an epoch of
// 1.28M small files 1.28M random puts into the index, a fifth of ferry's
// CPU in bench scale's remount read; kept to the hour, as relatime keeps
// a file system's, only the first use in an hour writes the row.
const atimeGrain = time.Hour

// now is the clock of uses, in unix nanoseconds.
func (s *Store) now() int64 {
	if s.hooks.now != nil {
		return s.hooks.now()
	}
	return time.Now().UnixNano()
}

// LOCKS_REQUIRED(s.mu)
func (s *Store) markDirtyLocked(e *entry, meta bool) {
	e.metaDirty = e.metaDirty || meta
	s.dirty[e.key] = e
}
