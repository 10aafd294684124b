package filecache

import (
	"errors"
	"hash/crc32"
	"io/fs"
	"syscall"
)

// WriteBlocksCRC stores consecutive blocks of obj starting at block
// first. p holds whole blocks (the last may be the object's short final
// block); a trailing partial block is ignored. crcs[i] is the CRC32C
// (Castagnoli) of block first+i if the caller computed it while the bytes
// were hot in the CPU cache (a download computes them as blocks arrive;
// over a whole part afterwards it costs a second pass through memory);
// crcs may be nil or short, and missing ones are computed here. It returns
// how many blocks, from first on, are now stored: fewer when the cache
// cannot make room or the disk fails. Never an error: the cache is best
// effort.
func (s *Store) WriteBlocksCRC(obj Key, first int64, p []byte, crcs []uint32) int {
	if s.blockLen(obj, first) < 0 {
		return 0
	}
	// Split p into whole blocks.
	var lens []int64
	for off, idx := int64(0), first; ; idx++ {
		bl := s.blockLen(obj, idx)
		if bl < 0 || off+bl > int64(len(p)) {
			break
		}
		lens = append(lens, bl)
		off += bl
	}
	if len(lens) == 0 {
		return 0
	}
	avail, volSize, err := s.hooks.statfs(s.dir)
	if err != nil || volSize == 0 {
		avail = 1 << 62 // unknown (or a file system without a size): only MaxSize applies
	}
	key := s.keyFor(obj)

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0
	}
	if _, ok := s.deleting[key]; ok {
		// The previous file for this key is still being deleted (see
		// deletion); skip. A later read will fetch and write again.
		s.mu.Unlock()
		return 0
	}
	e := s.lookupLocked(obj)
	isNew := e == nil
	if e == nil {
		if old := s.entries[key]; old != nil {
			// A hash collision would need SHA-256 broken; still, never
			// mix two objects in one file.
			s.mu.Unlock()
			return 0
		}
		e = &entry{
			key: key, own: true, obj: obj,
			nblocks: numBlocks(obj.Size, s.blockSize), path: s.pathFor(key), live: true,
		}
		e.present = newBitmap(e.nblocks)
		e.crcs = make([]uint32, e.nblocks)
		e.elem = s.lru.PushFront(e)
		s.entries[key] = e
		s.byObj[obj] = e
		s.markDirtyLocked(e, true)
	}
	s.touchLocked(e)
	if e.present.allSet(first, first+int64(len(lens))) {
		s.mu.Unlock()
		return len(lens)
	}
	// Space the write may add: absent blocks, rounded to the allocation
	// unit. Fit as long a prefix as we can make room for.
	needs := make([]int64, len(lens)+1)
	for i, bl := range lens {
		needs[i+1] = needs[i]
		if !e.present.get(first + int64(i)) {
			needs[i+1] += (bl + s.fsBlock - 1) / s.fsBlock * s.fsBlock
		}
	}
	victims, fit := s.makeRoomLocked(needs[len(lens)], e, avail)
	k := len(lens)
	for k > 0 && !fit(needs[k]) {
		k--
	}
	if k == 0 {
		if isNew {
			// Nothing fits: do not leave an empty entry behind.
			s.abandonLocked(e)
		}
		s.mu.Unlock()
		s.finishEvictions(victims)
		return 0
	}
	need := needs[k]
	s.reserved += need
	e.pins++
	e.writing++
	// Stamps around the write only for a file with checked blocks to
	// carry over (splice.go); one checked meanwhile is dropped instead.
	restamp := s.splice && e.checkedStamp != (fileStamp{})
	s.mu.Unlock()
	s.finishEvictions(victims)

	var total int64
	for _, bl := range lens[:k] {
		total += bl
	}
	sums := make([]uint32, k)
	for i, off := 0, int64(0); i < k; i++ {
		if i < len(crcs) {
			sums[i] = crcs[i]
		} else {
			sums[i] = crc32.Checksum(p[off:off+lens[i]], castagnoli)
		}
		off += lens[i]
	}
	stored, alloc := 0, int64(-1)
	var before, after fileStamp
	stamped := false
	f, err := s.fileFor(e, true)
	if err == nil {
		var berr error
		if restamp {
			before, berr = stampOf(f)
		}
		var n int
		n, err = s.writeData(e, f, p[:total], first*s.blockSize)
		// Blocks wholly written before a failure are good.
		for off := int64(0); stored < k && off+lens[stored] <= int64(n); stored++ {
			off += lens[stored]
		}
		var st syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &st) == nil {
			alloc = st.Blocks * 512
			after, stamped = stampFrom(&st), restamp && berr == nil
		}
	}
	if err != nil {
		s.writeFailed(err)
	}

	var excess []*entry
	s.mu.Lock()
	s.reserved -= need
	e.writing--
	s.wroteLocked(e, before, after, stamped, err == nil && stored == k)
	if e.live {
		for i := 0; i < stored; i++ {
			e.present.set(first + int64(i))
			e.crcs[first+int64(i)] = sums[i]
		}
		if alloc >= 0 && e.writing == 0 {
			// No other write to e in flight: what the file occupies is
			// e's size (the estimates charged by the writes before ours
			// are replaced by it). With writes in flight, their blocks
			// may show in alloc while still counted in s.reserved.
			grew := alloc - e.bytes
			s.used += grew
			e.bytes = alloc
			if grew > need {
				// The file system took more than the data (an extent
				// block): make room for the excess now.
				excess, _ = s.makeRoomLocked(0, e, avail-grew)
			}
		} else {
			// Charge our estimate for what we stored (nothing, if the
			// file could not even be opened); the last write in flight
			// settles it.
			s.used += needs[stored]
			e.bytes += needs[stored]
		}
		if stored > 0 {
			s.markDirtyLocked(e, true)
			s.dirtyBlocks += stored
		}
	} else {
		stored = 0 // evicted while we wrote; its file is going away
	}
	// Our new entry got nothing (its file could not be created or
	// written): do not leave it behind, holding a place in the LRU. Not
	// an eviction: its file, if any, is left for the key's next entry
	// (removing it could race with that entry creating it).
	abandon := isNew && e.live && e.pins == 1 && e.writing == 0 && e.bytes == 0 && e.present.count() == 0
	var files openFiles
	if abandon {
		s.abandonLocked(e)
		files = s.detachFileLocked(e)
	}
	kick := s.dirtyBlocks >= flushBlocks
	finish := s.unpinLocked(e) && !abandon
	s.mu.Unlock()
	files.close()
	s.finishEvictions(excess)
	if finish {
		s.finishEvictions([]*entry{e})
	}
	if kick {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	s.writeBlocks.Add(int64(stored))
	for _, bl := range lens[:stored] {
		s.writeBytes.Add(bl)
	}
	return stored
}

// writeFailed counts a failed data write and logs the first of each kind.
func (s *Store) writeFailed(err error) {
	s.writeErrors.Add(1)
	kind := "other"
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		kind = "disk full"
	case errors.Is(err, syscall.EROFS):
		kind = "read-only file system"
	case errors.Is(err, fs.ErrPermission):
		kind = "permission denied"
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		kind = "cache directory missing"
	case errors.Is(err, syscall.EIO):
		kind = "I/O error"
	}
	s.logOnce("write: "+kind, "cache write failed; reads go to the store (logged once per kind)", "kind", kind, "err", err)
}
