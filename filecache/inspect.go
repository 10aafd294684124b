package filecache

import bolt "go.etcd.io/bbolt"

// CachedBytes is how many bytes of obj's version are present in the cache
// (the blocks marked present, the last one counting its short length).
// It reads only memory: no disk access, no CRC check, and it does not
// count as a hit or a miss or change the LRU order, so asking never
// disturbs what it measures.
func (s *Store) CachedBytes(obj Key) int64 {
	if obj.Size == 0 {
		return 0
	}
	e := s.lockLookup(obj)
	defer s.mu.Unlock()
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
// reads every record of the index (cold entries' names are there only)
// and commits the index. It returns the entries dropped and their bytes.
func (s *Store) Drop(match func(name string) bool) (entries int, bytes int64) {
	cold, err := s.coldMatching(match)
	if err != nil {
		s.logOnce("index read", "cache index could not be read; cold entries were not dropped", "err", err)
	}
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
	for _, c := range cold {
		// Still cold: one warmed meanwhile was dropped above, or is
		// newer than the call.
		if row, ok := s.cold.rowOf(c.key); ok && row == c.row {
			sl, _ := s.cold.take(c.key)
			entries++
			bytes += sl.bytes
			s.evictions.Add(1)
			victims = append(victims, s.dropColdLocked(c.key.String(), sl.row, sl.bytes))
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

// coldMatching returns the keys and rows of the index's entries whose
// names match: candidates, for the caller to check that they are still
// cold.
func (s *Store) coldMatching(match func(name string) bool) ([]coldRow, error) {
	db := s.liveDB.Load()
	if db == nil {
		return nil, nil
	}
	var found []coldRow
	err := guard(func() error {
		return db.View(func(tx *bolt.Tx) error {
			var cur coldRow // the entry's atime row, which comes before its record
			return tx.Bucket(rowsBucket).ForEach(func(k, v []byte) error {
				row, tag, ok := rowOf(k)
				switch {
				case !ok || len(k) != rowPrefixLen+1:
				case tag == tagAtime:
					var good bool
					if cur, good = decodeAtime(k, v); !good {
						cur = coldRow{} // row 0 is no entry's
					}
				case tag == tagEntry && cur.row == row:
					// Only this bucket's: records do not name theirs, keys do.
					rec, err := decodeRecord(k, v)
					if err == nil && match(rec.name) && s.keySum(Key{Name: rec.name, Version: rec.version, Size: rec.size}) == cur.key {
						found = append(found, cur)
					}
				}
				return nil
			})
		})
	})
	return found, err
}
