package filecache

import (
	"errors"
	"hash/crc32"
	"io/fs"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// WillRead tells the kernel that blocks [first, first+n) of obj are about
// to be read (posix_fadvise WILLNEED), so that the disk reads behind one
// application read of many blocks run together instead of one block
// after another. Best effort: a missing entry or a failed advice is
// ignored; it reads nothing and changes no state.
func (s *Store) WillRead(obj Key, first, n int64) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	e := s.lookupLocked(obj)
	if s.closed || e == nil {
		s.mu.Unlock()
		return
	}
	e.pins++
	s.mu.Unlock()
	if f, err := s.fileFor(e, false); err == nil {
		_ = unix.Fadvise(int(f.Fd()), first*s.blockSize, n*s.blockSize, unix.FADV_WILLNEED)
	}
	s.unpin(e)
}

// HasBlock reports whether block idx of obj is cached (it may still fail
// its CRC check when read).
func (s *Store) HasBlock(obj Key, idx int64) bool {
	if s.blockLen(obj, idx) < 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookupLocked(obj)
	return e != nil && e.present.get(idx)
}

// ReadBlocks fills p with the consecutive blocks first, first+1, ... of
// obj that it holds (whole blocks; the object's last may be short), in
// one disk read; ok[i] reports block first+i (len(ok) is the block count)
// and the count of blocks filled is returned. A block is not filled if it
// is absent, was evicted, or fails its CRC (then it is dropped and
// counted); its bytes in p are then undefined. It never fills a block with
// bytes other than those stored for this object version.
func (s *Store) ReadBlocks(obj Key, first int64, p []byte, ok []bool) int {
	clear(ok)
	if len(ok) == 0 {
		return 0
	}
	var span int64
	for i := range ok {
		bl := s.blockLen(obj, first+int64(i))
		if bl < 0 || i < len(ok)-1 && bl != s.blockSize {
			return 0
		}
		span += bl
	}
	if span != int64(len(p)) {
		return 0
	}
	want := make([]uint32, len(ok))
	wanted := make([]bool, len(ok))
	s.mu.Lock()
	e := s.lookupLocked(obj)
	npresent := 0
	if !s.closed && e != nil {
		for i := range ok {
			if e.present.get(first + int64(i)) {
				wanted[i], want[i] = true, e.crcs[first+int64(i)]
				npresent++
			}
		}
	}
	if npresent == 0 {
		s.mu.Unlock()
		s.countMissBlocks(len(ok), int64(len(p)))
		return 0
	}
	e.pins++
	s.touchLocked(e)
	// A read check running (or asked for) counts this read; taken before
	// the read, as its stamp was.
	wantCheck, rc := e.wantReadCheck, e.readCheck
	s.mu.Unlock()

	if s.hooks.beforeRead != nil {
		s.hooks.beforeRead()
	}
	// Read from the first present block to the last.
	lo, hi := slices.Index(wanted, true), len(wanted)-1
	for !wanted[hi] {
		hi--
	}
	corrupt := make([]bool, len(ok))
	var stamp fileStamp
	stampErr := error(errNoStamp)
	f, err := s.fileFor(e, false)
	if err == nil {
		if wantCheck && rc == nil {
			rc = s.startReadCheck(e, f)
		}
		if s.splice {
			// Before the read, as for the read check: a change after
			// it moves the stamp, and the blocks are checked again.
			stamp, stampErr = stampOf(f)
		}
		from, to := int64(lo)*s.blockSize, min(int64(hi+1)*s.blockSize, int64(len(p)))
		n, rerr := f.ReadAt(p[from:to], first*s.blockSize+from)
		if s.hooks.afterRead != nil {
			s.hooks.afterRead()
		}
		for i := lo; i <= hi; i++ {
			if !wanted[i] {
				continue
			}
			bs, be := int64(i)*s.blockSize-from, min(int64(i+1)*s.blockSize, int64(len(p)))-from
			switch {
			case be <= int64(n) && crc32.Checksum(p[from+bs:from+be], castagnoli) == want[i]:
				ok[i] = true
			case be <= int64(n) || rerr != nil:
				// Wrong bytes or bytes gone: a torn write, a power cut, a
				// bad sector or a file truncated behind our back. Every
				// block from where the read stopped is dropped, not just
				// the first: a block left marked present is never
				// rewritten (writes skip present blocks), so the
				// cache would not heal; a healthy block after a bad
				// sector costs one refetch instead.
				corrupt[i] = true
			}
		}
		if rc != nil && !slices.Contains(corrupt, true) {
			s.countReadCheck(e, f, rc, first, ok)
		}
	}

	s.mu.Lock()
	var finish *entry
	dropped := 0
	for i := range ok {
		if corrupt[i] && s.dropLocked(e, first+int64(i), want[i]) {
			dropped++
		}
	}
	if stampErr == nil {
		s.markCheckedLocked(e, stamp, first, ok, want)
	}
	// The data file is gone (cache dir deleted?) or cannot be opened
	// (its mode changed, an I/O error): forget the entry, so that its
	// blocks are fetched and written again rather than missed forever.
	lost := err != nil && !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) && !errors.Is(err, syscall.ENOMEM)
	if lost && e.live {
		finish = s.evictLocked(e)
	}
	if s.unpinLocked(e) {
		finish = e
	}
	s.mu.Unlock()
	s.finishEvictions([]*entry{finish})
	if dropped > 0 {
		s.countCorrupt(e, dropped, first+int64(slices.Index(corrupt, true)))
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.logOnce("read: missing", "cache file vanished (cache directory deleted?); its blocks are fetched again", "object", e.obj.Name)
	case lost:
		s.logOnce("read: unreadable", "cache file cannot be opened; its blocks are fetched again", "object", e.obj.Name, "err", err)
	}
	filled, hit := 0, int64(0)
	for i, good := range ok {
		if good {
			filled++
			hit += min(int64(i+1)*s.blockSize, int64(len(p))) - int64(i)*s.blockSize
		}
	}
	s.hitBlocks.Add(int64(filled))
	s.hitBytes.Add(hit)
	if missed := len(ok) - filled; missed > 0 {
		s.countMissBlocks(missed, int64(len(p))-hit)
	}
	return filled
}

// dropLocked forgets block idx of e, read as failing its CRC, if it is
// still the block that was read (crc want): it is fetched and written
// again. LOCKS_REQUIRED(s.mu)
func (s *Store) dropLocked(e *entry, idx int64, want uint32) bool {
	if !e.live || !e.present.get(idx) || e.crcs[idx] != want {
		return false
	}
	e.present.clear(idx)
	e.crcs[idx] = 0
	e.wantReadCheck, e.readCheck = false, nil
	if e.checked != nil {
		e.checked.clear(idx)
	}
	s.markDirtyLocked(e, true)
	return true
}

// countCorrupt counts n blocks of e dropped by dropLocked, the first at
// idx.
func (s *Store) countCorrupt(e *entry, n int, idx int64) {
	s.corrupt.Add(int64(n))
	// Once: a failing disk would otherwise log every block it holds.
	s.logOnce("read: corrupt", "cache block failed its checksum; dropped and fetched again (logged once; see ferry_cache_corrupt_blocks_total)",
		"object", e.obj.Name, "block", idx)
}

func (s *Store) countMissBlocks(blocks int, bytes int64) {
	s.missBlocks.Add(int64(blocks))
	s.missBytes.Add(bytes)
}
