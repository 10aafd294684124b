package filecache

// CachedBytes is how many bytes of obj's version are present in the cache
// (the blocks marked present, the last one counting its short length).
// It reads only memory: no disk access, no CRC check, and it does not
// count as a hit or a miss or change the LRU order, so asking never
// disturbs what it measures.
func (s *Store) CachedBytes(obj Key) int64 {
	if obj.Size == 0 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookupLocked(obj)
	if e == nil {
		return 0
	}
	n := e.present.count() * s.blockSize
	// Every block is whole but the last: correct for it if present.
	if last := e.nblocks - 1; e.present.get(last) {
		n -= s.blockSize - s.blockLen(obj, last)
	}
	return n
}

// Drop removes the cached data of every version of the named objects that
// match, as if evicted (counted in ferry_cache_evictions_total). It is for
// an operator's explicit `ferry invalidate --data`, not the read path: it
// scans every entry and commits the index. It returns the entries dropped and their bytes.
func (s *Store) Drop(match func(name string) bool) (entries int, bytes int64) {
	s.mu.Lock()
	var victims []*entry
	for _, e := range s.byObj {
		if !match(e.obj.Name) {
			continue
		}
		entries++
		bytes += e.bytes
		if v := s.evictLocked(e); v != nil {
			victims = append(victims, v)
		}
	}
	s.mu.Unlock()
	s.finishEvictions(victims)
	if entries > 0 {
		// Commit the deletions now: until they are, the dropped versions
		// cannot be cached again (see deletion).
		if err := s.flush(); err != nil {
			s.logOnce("index commit", "cache index commit failed; will retry", "err", err)
		}
	}
	return entries, bytes
}
