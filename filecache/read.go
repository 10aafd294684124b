package filecache

import (
	"errors"
	"hash/crc32"
	"io/fs"
	"os"
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
	e := s.lockLookup(obj)
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
	e := s.lockLookup(obj)
	defer s.mu.Unlock()
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
	if len(ok) == 0 || s.spanOf(obj, first, len(ok)) != int64(len(p)) {
		return 0
	}
	r := blockRead{first: first, ok: ok, wanted: make([]bool, len(ok)), want: make([]uint32, len(ok))}
	e, wantCheck, rc := s.pinForRead(obj, &r)
	if e == nil {
		s.countMissBlocks(len(ok), int64(len(p)))
		return 0
	}
	r.corrupt = make([]bool, len(ok))
	if s.hooks.beforeRead != nil {
		s.hooks.beforeRead()
	}
	f, err := s.fileFor(e, false)
	if err == nil {
		if wantCheck && rc == nil {
			rc = s.startReadCheck(e, f)
		}
		if s.splice {
			// Before the read, as for the read check: a change after
			// it moves the stamp, and the blocks are checked again.
			stamp, serr := stampOf(f)
			r.stamp, r.stamped = stamp, serr == nil
		}
		s.readAndCheck(f, p, &r)
		if rc != nil && !slices.Contains(r.corrupt, true) {
			s.countReadCheck(e, f, rc, first, ok)
		}
	}
	s.settleRead(e, &r, err)
	return s.countHits(ok, int64(len(p)))
}

// blockRead is one ReadBlocks call: its blocks, what the entry said of
// them when the read started, and what the read found. It holds nothing
// that escapes (not the entry, not the buffer, which crc32 leaks), so
// that it and its slices stay on the stack: ReadBlocks allocates nothing.
type blockRead struct {
	first int64
	ok    []bool // block first+i was read and passed its CRC
	// wanted[i]: block first+i was present, with CRC want[i].
	wanted []bool
	want   []uint32
	// corrupt[i]: block first+i failed its CRC, or the read stopped
	// before it.
	corrupt []bool
	// stamp is the data file's before the read, if stamped (Splice).
	stamp   fileStamp
	stamped bool
}

// spanOf is the length of blocks [first, first+n) of obj, or -1 if they
// are not all whole blocks (only the object's last may be short).
func (s *Store) spanOf(obj Key, first int64, n int) int64 {
	var span int64
	for i := 0; i < n; i++ {
		bl := s.blockLen(obj, first+int64(i))
		if bl < 0 || i < n-1 && bl != s.blockSize {
			return -1
		}
		span += bl
	}
	return span
}

// pinForRead returns obj's entry, pinned, if any of r's blocks is
// present, noting in r which are and their CRCs, and the read check the
// read counts toward; nil if none is.
func (s *Store) pinForRead(obj Key, r *blockRead) (e *entry, wantCheck bool, rc *readCheck) {
	e = s.lockLookup(obj)
	defer s.mu.Unlock()
	if s.closed || e == nil {
		return nil, false, nil
	}
	npresent := 0
	for i := range r.ok {
		if idx := r.first + int64(i); e.present.get(idx) {
			r.wanted[i], r.want[i] = true, e.crcs[idx]
			npresent++
		}
	}
	if npresent == 0 {
		return nil, false, nil
	}
	e.pins++
	s.useLocked(e, min(int64(npresent)*s.blockSize, int64(e.obj.Size)), false)
	// A read check running (or asked for) counts this read; taken before
	// the read, as its stamp was.
	return e, e.wantReadCheck, e.readCheck
}

// readAndCheck reads r's present blocks from f into p in one pread, from
// the first of them to the last, and checks each against its CRC.
func (s *Store) readAndCheck(f *os.File, p []byte, r *blockRead) {
	lo, hi := slices.Index(r.wanted, true), len(r.wanted)-1
	for !r.wanted[hi] {
		hi--
	}
	size := int64(len(p))
	from, to := int64(lo)*s.blockSize, min(int64(hi+1)*s.blockSize, size)
	n, rerr := f.ReadAt(p[from:to], r.first*s.blockSize+from)
	if s.hooks.afterRead != nil {
		s.hooks.afterRead()
	}
	for i := lo; i <= hi; i++ {
		if !r.wanted[i] {
			continue
		}
		bs, be := int64(i)*s.blockSize-from, min(int64(i+1)*s.blockSize, size)-from
		switch {
		case be <= int64(n) && crc32.Checksum(p[from+bs:from+be], castagnoli) == r.want[i]:
			r.ok[i] = true
		case be <= int64(n) || rerr != nil:
			// Wrong bytes or bytes gone: a torn write, a power cut, a
			// bad sector or a file truncated behind our back. Every
			// block from where the read stopped is dropped, not just
			// the first: a block left marked present is never
			// rewritten (writes skip present blocks), so the
			// cache would not heal; a healthy block after a bad
			// sector costs one refetch instead.
			r.corrupt[i] = true
		}
	}
}

// settleRead ends r of e (pinned), whose data file opened with err: it
// drops the blocks found corrupt, records those found good for
// Spliceable, forgets e if its file is lost, and unpins it.
func (s *Store) settleRead(e *entry, r *blockRead, err error) {
	s.mu.Lock()
	var finish *entry
	dropped := 0
	for i := range r.ok {
		if r.corrupt[i] && s.dropLocked(e, r.first+int64(i), r.want[i]) {
			dropped++
		}
	}
	if r.stamped {
		s.markCheckedLocked(e, r.stamp, r.first, r.ok, r.want)
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
		s.countCorrupt(e, dropped, r.first+int64(slices.Index(r.corrupt, true)))
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.logOnce("read: missing", "cache file vanished (cache directory deleted?); its blocks are fetched again", "object", e.obj.Name)
	case lost:
		s.logOnce("read: unreadable", "cache file cannot be opened; its blocks are fetched again", "object", e.obj.Name, "err", err)
	}
}

// countHits counts the blocks of a read of n bytes that ok says were
// filled as hits, the rest as misses, and returns how many were filled.
func (s *Store) countHits(ok []bool, n int64) int {
	filled, hit := 0, int64(0)
	for i, good := range ok {
		if good {
			filled++
			hit += min(int64(i+1)*s.blockSize, n) - int64(i)*s.blockSize
		}
	}
	s.hitBlocks.Add(int64(filled))
	s.hitBytes.Add(hit)
	if missed := len(ok) - filled; missed > 0 {
		s.countMissBlocks(missed, n-hit)
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
	s.unverifiedLocked(e)
	if e.checked != nil {
		e.checked.clear(idx)
	}
	s.markBlocksDirtyLocked(e, idx, idx+1)
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
