package filecache

import (
	"errors"
	"hash/crc32"
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
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
	// Split p into whole blocks. (Here, not in a function that returns
	// them: lens stays on the stack.)
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
	w := blockWrite{first: first, lens: lens, needs: make([]int64, len(lens)+1), avail: s.freeSpace()}
	e := s.reserveWrite(obj, &w)
	if e == nil {
		return w.stored
	}
	w.sums = make([]uint32, len(w.lens))
	fillCRCs(w.sums, p, w.lens, crcs)
	err := s.writeFile(e, p, &w)
	if err != nil {
		s.writeFailed(err)
	}
	ok := err == nil && w.stored == len(w.lens)
	s.settleWrite(e, &w, ok)
	if ok && s.checkWrites && first == 0 && !w.direct && obj.Size <= writeCheckMax {
		s.checkWritten(e, obj, int64(len(w.lens)))
	}
	s.writeBlocks.Add(int64(w.stored))
	for _, bl := range w.lens[:w.stored] {
		s.writeBytes.Add(bl)
	}
	return w.stored
}

// blockWrite is one WriteBlocksCRC call: its blocks, the room reserved
// for them, and what the write did. Like blockRead it holds nothing that
// escapes (not the entry, not the buffer, not the error), so that what it
// points to may stay on the stack.
type blockWrite struct {
	first int64
	lens  []int64 // the blocks' lengths; cut to those there is room for
	// needs[i] is the space the first i blocks may add: those absent,
	// rounded to the allocation unit.
	needs    []int64
	reserved int64    // needs[len(lens)], counted in Store.reserved
	avail    int64    // the volume's free space before the write
	isNew    bool     // the entry was made for this write
	sums     []uint32 // the blocks' CRCs
	// restamp: take the file's stamps around the write (splice.go).
	restamp bool

	// What the write did: the blocks it wrote whole, the file's allocated
	// bytes after it (-1: unknown), and its stamps around it if stamped.
	stored        int
	alloc         int64
	before, after fileStamp
	stamped       bool
	direct        bool // some bytes bypassed the page cache (O_DIRECT)
}

// freeSpace is the volume's free space as a write counts it.
func (s *Store) freeSpace() int64 {
	avail, volSize, err := s.hooks.statfs(s.dir)
	if err != nil || volSize == 0 {
		return 1 << 62 // unknown (or a file system without a size): only MaxSize applies
	}
	return avail
}

// reserveWrite returns obj's entry, made if need be, pinned for w, with
// room reserved for as many of w's blocks as fit (w.lens is cut to them).
// It returns nil if there is nothing to write, with w.stored set: all the
// blocks are stored already, or none can be.
func (s *Store) reserveWrite(obj Key, w *blockWrite) *entry {
	ck := s.keySum(obj)
	e, isNew := s.entryForWriteLocked(obj, ck, s.lockLookupSum(obj, &ck))
	if e == nil {
		s.mu.Unlock()
		return nil
	}
	w.isNew = isNew
	var n int64
	for _, bl := range w.lens {
		n += bl
	}
	s.useLocked(e, n, true)
	if e.present.allSet(w.first, w.first+int64(len(w.lens))) {
		s.mu.Unlock()
		w.stored = len(w.lens)
		return nil
	}
	// Space the write may add: absent blocks, rounded to the allocation
	// unit. Fit as long a prefix as we can make room for.
	for i, bl := range w.lens {
		w.needs[i+1] = w.needs[i]
		if !e.present.get(w.first + int64(i)) {
			w.needs[i+1] += (bl + s.fsBlock - 1) / s.fsBlock * s.fsBlock
		}
	}
	victims, fit := s.makeRoomLocked(w.needs[len(w.lens)], e, w.avail)
	k := len(w.lens)
	for k > 0 && !fit(w.needs[k]) {
		k--
	}
	if k == 0 {
		if isNew {
			// Nothing fits: do not leave an empty entry behind.
			s.abandonLocked(e)
		}
		s.mu.Unlock()
		s.finishEvictions(victims)
		return nil
	}
	w.lens, w.reserved = w.lens[:k], w.needs[k]
	s.reserved += w.reserved
	e.reserved += w.reserved
	e.pins++
	e.writing++
	// Stamps around the write only for a file with checked blocks to
	// carry over (splice.go); one checked meanwhile is dropped instead.
	w.restamp = s.splice && e.checkedStamp != (fileStamp{})
	s.mu.Unlock()
	s.finishEvictions(victims)
	return e
}

// entryForWriteLocked returns obj's entry, e if it has one (warm), made
// if not (isNew), or nil if obj must not be written now. ck is obj's key.
// LOCKS_REQUIRED(s.mu)
func (s *Store) entryForWriteLocked(obj Key, ck coldKey, e *entry) (_ *entry, isNew bool) {
	if s.closed {
		return nil, false
	}
	if e != nil {
		return e, false
	}
	key := ck.String()
	if _, ok := s.deleting[key]; ok {
		// The previous file for this key is still being deleted (see
		// deletion); skip. A later read will fetch and write again.
		return nil, false
	}
	if old := s.entries[key]; old != nil || s.cold.has(ck) {
		// A hash collision would need SHA-256 broken; still, never
		// mix two objects in one file. (A cold entry for key is warmed
		// by the lookup; one cooled again since is left for the next.)
		return nil, false
	}
	e = &entry{
		key: key, row: s.nextRow, own: true, obj: obj,
		nblocks: numBlocks(obj.Size, s.blockSize), live: true,
	}
	s.nextRow++
	e.present = newBitmap(e.nblocks)
	e.crcs = make([]uint32, e.nblocks)
	s.insertLocked(e)
	s.entries[key] = e
	s.byObj[obj] = e
	s.markDirtyLocked(e, true)
	return e, true
}

// fillCRCs sets sums[i] to the CRC32C of block i of p (lengths lens),
// taken from crcs where the caller computed it.
func fillCRCs(sums []uint32, p []byte, lens []int64, crcs []uint32) {
	for i, off := 0, int64(0); i < len(sums); i++ {
		if i < len(crcs) {
			sums[i] = crcs[i]
		} else {
			sums[i] = crc32.Checksum(p[off:off+lens[i]], castagnoli)
		}
		off += lens[i]
	}
}

// writeFile writes w's blocks, from p, to the data file of e (pinned), and
// notes in w what the write did.
func (s *Store) writeFile(e *entry, p []byte, w *blockWrite) error {
	w.alloc = -1
	f, err := s.fileFor(e, true)
	if err != nil {
		return err
	}
	var berr error
	if w.restamp {
		w.before, berr = stampOf(f)
	}
	var total int64
	for _, bl := range w.lens {
		total += bl
	}
	n, direct, err := s.writeData(e, f, p[:total], w.first*s.blockSize)
	w.direct = direct > 0
	// Blocks wholly written before a failure are good.
	for off := int64(0); w.stored < len(w.lens) && off+w.lens[w.stored] <= int64(n); w.stored++ {
		off += w.lens[w.stored]
	}
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) == nil {
		w.alloc = st.Blocks * 512
		w.after, w.stamped = stampFrom(&st), w.restamp && berr == nil
	}
	return err
}

// settleWrite ends w, written to e (pinned; ok: all of it, without
// error): it releases the reservation, marks the blocks written, and
// unpins e, or abandons e if it was made for w and got nothing. If e was
// evicted meanwhile, nothing is stored (w.stored is 0).
func (s *Store) settleWrite(e *entry, w *blockWrite, ok bool) {
	var excess []*entry
	s.mu.Lock()
	s.reserved -= w.reserved
	e.reserved -= w.reserved
	if !e.live {
		s.reservedEvicted -= w.reserved
	}
	e.writing--
	s.wroteLocked(e, w.before, w.after, w.stamped, ok)
	if e.live {
		excess = s.storedLocked(e, w)
	} else {
		w.stored = 0 // evicted while we wrote; its file is going away
	}
	// Our new entry got nothing (its file could not be created or
	// written): do not leave it behind, holding a place in the LRU. Not
	// an eviction: its file, if any, is left for the key's next entry
	// (removing it could race with that entry creating it).
	abandon := w.isNew && e.live && e.pins == 1 && e.writing == 0 && e.bytes == 0 && e.present.count() == 0
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
}

// storedLocked marks the blocks w wrote present in e (live), with their
// CRCs, and charges e the space the write took. It returns the entries
// evicted to make room for more than was reserved, for the caller to
// finish outside the lock. LOCKS_REQUIRED(s.mu)
func (s *Store) storedLocked(e *entry, w *blockWrite) (excess []*entry) {
	for i := 0; i < w.stored; i++ {
		e.present.set(w.first + int64(i))
		e.crcs[w.first+int64(i)] = w.sums[i]
	}
	if w.alloc >= 0 && e.writing == 0 {
		// No other write to e in flight: what the file occupies is
		// e's size (the estimates charged by the writes before ours
		// are replaced by it). With writes in flight, their blocks
		// may show in alloc while still counted in s.reserved.
		grew := w.alloc - e.bytes
		s.allocatedLocked(e, w.alloc)
		if grew > w.reserved {
			// The file system took more than the data (an extent
			// block): make room for the excess now.
			excess, _ = s.makeRoomLocked(0, e, w.avail-grew)
		}
	} else {
		// Charge our estimate for what we stored (nothing, if the
		// file could not even be opened); the last write in flight
		// settles it.
		s.allocatedLocked(e, e.bytes+w.needs[w.stored])
	}
	if w.stored > 0 {
		// Its file changed: a check of it no longer holds (nor would
		// it match the file's stamp).
		s.unverifiedLocked(e)
		s.markBlocksDirtyLocked(e, w.first, w.first+int64(w.stored))
		s.dirtyBlocks += w.stored
	}
	return excess
}

// writeCheckMax is the largest object whose write checks it
// (Config.CheckWrites). A check as written reads the file back: only a
// file written whole through the page cache by one write, so that it
// costs a copy from memory and a CRC pass, small beside the fetch, and
// not a disk read. Files written with O_DIRECT (those of 4 KiB or more,
// where the volume allows it) are checked by the reads that serve them
// instead, each byte read from the disk once.
const writeCheckMax = 1 << 20

// checkWritten reads back e's data file, whose blocks (all n of them,
// through the page cache) the write of obj that just ended wrote, and
// records the check as WholeFile.Check does: the file's first
// passthrough open trusts it, and the next commit writes its checked
// row beside the entry's new rows instead of at a random place in a
// later epoch. Nothing if e is no longer live, has blocks this write did
// not write, is being written or already counts as checked.
func (s *Store) checkWritten(e *entry, obj Key, n int64) {
	s.mu.Lock()
	if s.closed || !e.live || e.writing != 0 || e.nblocks != n || e.present.count() != n || e.verified != (fileStamp{}) {
		s.mu.Unlock()
		return
	}
	e.pins++
	s.mu.Unlock()
	if f, err := s.fileFor(e, false); err == nil {
		if before, err := stampOf(f); err == nil {
			s.checkFile(e, f, obj, before)
		}
	}
	s.mu.Lock()
	finish := s.unpinLocked(e)
	s.mu.Unlock()
	if finish {
		s.finishEvictions([]*entry{e})
	}
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
