package filecache

import (
	"hash/crc32"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"ferry/ranges"
)

// fileStamp identifies a data file and its last change: any write to it
// through the file system moves its ctime, which no one can set back.
// The zero stamp is "never checked".
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

func stampOf(f *os.File) (fileStamp, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileStamp{}, err
	}
	return stampFrom(&st), nil
}

func stampFrom(st *unix.Stat_t) fileStamp {
	return fileStamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// wholeBufs are Check's read buffers: 256 KiB, so that the bytes the CRC
// reads are still in the CPU's cache from the copy (a larger buffer made
// every opened 128 KiB file touch megabytes of fresh memory).
var wholeBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// WholeFile is the data file of an object held whole, handed out by Whole
// for someone who reads it without the store (the kernel, through FUSE
// passthrough). Until Release the entry is pinned and held: eviction
// passes it by, and if it is evicted all the same (Drop), its file stays,
// and its bytes count against the cache's limits, until Release.
type WholeFile struct {
	s    *Store
	e    *entry
	f    *os.File
	obj  Key
	once sync.Once
}

// Whole returns obj's data file if every block of obj is cached. The
// bytes are not checked yet: Check does that. Its caller must call
// Release once.
func (s *Store) Whole(obj Key) (*WholeFile, bool) {
	if obj.Size == 0 {
		return nil, false
	}
	e := s.lockLookup(obj)
	if s.closed || e == nil || e.present.count() != e.nblocks {
		s.mu.Unlock()
		return nil, false
	}
	e.pins++
	e.holds++
	s.useLocked(e, int64(obj.Size), false)
	s.mu.Unlock()
	w := &WholeFile{s: s, e: e, obj: obj}
	f, err := s.fileFor(e, false)
	if err != nil {
		w.Release()
		return nil, false
	}
	w.f = f
	return w, true
}

// File is the data file. The caller must not close it.
func (w *WholeFile) File() *os.File { return w.f }

// Check reports whether the file holds exactly the object's bytes. It
// reads the file and checks every block's CRC32C the first time the
// process asks, and again whenever the file changed since (its stamp:
// inode, size, mtime, ctime); otherwise it only looks at the stamp. A
// block that fails is dropped, counted and logged as ReadBlocks does.
// Check also marks the entry recently used.
//
// What it cannot see is a change below the file system (a disk that
// returns other bytes than it was given, for a file no one wrote to),
// nor, on kernels without fine-grained timestamps (before 6.13, or file
// systems without them), a write in the same clock tick as the change
// before it: ReadBlocks checks every read instead.
func (w *WholeFile) Check() bool {
	s, e := w.s, w.e
	s.mu.Lock()
	if e.live {
		s.touchLocked(e)
		if e.present.count() != e.nblocks {
			// A read through the store dropped a block as bad since.
			s.mu.Unlock()
			return false
		}
	}
	verified := e.verified
	s.mu.Unlock()
	before, err := stampOf(w.f)
	if err != nil {
		return false
	}
	if before == verified {
		return true
	}
	return s.checkFile(e, w.f, w.obj, before)
}

// checkFile reads e's data file f (e pinned; f showed the stamp before)
// whole and checks every block, and records the file as checked at
// before if all of it is good and it did not change meanwhile.
func (s *Store) checkFile(e *entry, f *os.File, obj Key, before fileStamp) bool {
	// A file cut short is checked too, so that its lost blocks are
	// dropped now; a longer one (appended to behind our back) may hold
	// good blocks, but the kernel would read past the object's end.
	if !s.checkWhole(e, f, obj) || before.size != int64(obj.Size) {
		return false
	}
	after, err := stampOf(f)
	if err != nil || after != before { // written while we read it
		return false
	}
	s.wholeChecks.Add(1)
	s.wholeCheckedBytes.Add(int64(obj.Size))
	s.mu.Lock()
	s.verifiedLocked(e, before)
	// A read check asked for is done too: its reads would count a file
	// already found good.
	e.wantReadCheck, e.readCheck = false, nil
	s.mu.Unlock()
	return true
}

// Release gives the file back; an evicted entry's file is unlinked now.
func (w *WholeFile) Release() {
	w.once.Do(func() {
		s, e := w.s, w.e
		s.mu.Lock()
		if e.holds--; e.holds == 0 && !e.live {
			s.heldEvicted -= e.bytes
		}
		finish := s.unpinLocked(e)
		s.mu.Unlock()
		if finish {
			s.finishEvictions([]*entry{e})
		}
	})
}

// checkWhole reads every block of e (pinned) from f and checks its CRC;
// blocks that fail are dropped.
func (s *Store) checkWhole(e *entry, f *os.File, obj Key) bool {
	s.mu.Lock()
	want := make([]uint32, e.nblocks)
	copy(want, e.crcs)
	present := e.present.count() == e.nblocks
	s.mu.Unlock()
	if !present { // a block was dropped since Whole
		return false
	}
	bp := wholeBufs.Get().(*[]byte)
	defer wholeBufs.Put(bp)
	buf := *bp
	if n := int64(len(buf)) / s.blockSize * s.blockSize; n > 0 {
		buf = buf[:n]
	} else {
		buf = make([]byte, s.blockSize)
	}
	size := int64(obj.Size)
	var bad []int64
	for off := int64(0); off < size; off += int64(len(buf)) {
		p := buf[:min(int64(len(buf)), size-off)]
		n, _ := f.ReadAt(p, off)
		for b := int64(0); b*s.blockSize < int64(len(p)); b++ {
			lo, hi := b*s.blockSize, min((b+1)*s.blockSize, int64(len(p)))
			if int64(n) < hi || crc32.Checksum(p[lo:hi], castagnoli) != want[off/s.blockSize+b] {
				bad = append(bad, off/s.blockSize+b)
			}
		}
		if n < len(p) {
			// Cut short (a read error, a file truncated behind our
			// back): the rest is unreadable too.
			for idx := (off + int64(len(p)) + s.blockSize - 1) / s.blockSize; idx < e.nblocks; idx++ {
				bad = append(bad, idx)
			}
			break
		}
		if s.hooks.duringCheck != nil {
			s.hooks.duringCheck()
		}
	}
	if len(bad) == 0 {
		return true
	}
	s.mu.Lock()
	dropped := 0
	for _, idx := range bad {
		if s.dropLocked(e, idx, want[idx]) {
			dropped++
		}
	}
	s.mu.Unlock()
	if dropped > 0 {
		s.countCorrupt(e, dropped, bad[0])
	}
	return false
}

// Checked reports, without reading the file, whether it is whole and
// unchanged since it was last found good: by Check, or by reads through
// the store that covered every block (CheckAsRead). False means Check
// would read it whole.
func (w *WholeFile) Checked() bool {
	s, e := w.s, w.e
	s.mu.Lock()
	ok := e.live && e.present.count() == e.nblocks
	verified := e.verified
	s.mu.Unlock()
	if !ok || verified == (fileStamp{}) {
		return false
	}
	st, err := stampOf(w.f)
	return err == nil && st == verified
}

// CheckAsRead asks that the reads of the object through the store count
// toward a check of the whole file: once they have found every block
// good, with the file unchanged from before the first of them to after
// the last, the file counts as checked (Checked, and Check without
// reading it). So a reader of the whole file checks it as it reads it,
// where Check would read it once more. It lasts until the check is done
// (by the reads, or by Check) or a block is dropped; a change to the
// file starts the count over, and a file longer than the object never
// passes. It reports whether a read check was asked for already and is
// not done: reads since an earlier ask left blocks unread (a reader of
// part of the file), or are still under way.
func (w *WholeFile) CheckAsRead() (pending bool) {
	s, e := w.s, w.e
	s.mu.Lock()
	defer s.mu.Unlock()
	pending = e.wantReadCheck
	if e.live && e.present.count() == e.nblocks {
		e.wantReadCheck = true
	}
	return pending
}

// readCheck counts the blocks that reads through the store found good
// since the data file showed stamp (taken before any of those reads).
type readCheck struct {
	stamp fileStamp // constant
	good  bitmap    // GUARDED_BY(Store.mu); blocks found good
	n     int64     // GUARDED_BY(Store.mu); of them
}

// startReadCheck starts e's read check, wanted, for a read of f (e
// pinned, f its data file) about to start: it returns the check the read
// counts toward, or nil.
func (s *Store) startReadCheck(e *entry, f *os.File) *readCheck {
	st, err := stampOf(f)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.wantReadCheck && e.readCheck == nil {
		e.readCheck = &readCheck{stamp: st, good: newBitmap(e.nblocks)}
	}
	return e.readCheck
}

// countReadCheck adds the blocks of a read (first, first+1, ...; ok for
// those found good) to rc. When every block is counted, the file is
// checked if it still shows the stamp taken before the first of them.
func (s *Store) countReadCheck(e *entry, f *os.File, rc *readCheck, first int64, ok []bool) {
	s.mu.Lock()
	if e.readCheck != rc {
		s.mu.Unlock()
		return
	}
	for i, good := range ok {
		if idx := first + int64(i); good && !rc.good.get(idx) {
			rc.good.set(idx)
			rc.n++
		}
	}
	done := rc.n == e.nblocks
	if done {
		// No other read starts a check while this one ends.
		e.readCheck, e.wantReadCheck = nil, false
	}
	s.mu.Unlock()
	if !done {
		return
	}
	if s.hooks.readCheckEnding != nil {
		s.hooks.readCheckEnding()
	}
	st, err := stampOf(f)
	s.mu.Lock()
	defer s.mu.Unlock()
	whole := e.live && e.present.count() == e.nblocks
	// A longer file may hold good blocks, but the kernel would read past
	// the object's end (as in Check).
	if err == nil && st == rc.stamp && whole && st.size == int64(e.obj.Size) {
		s.verifiedLocked(e, st)
		s.readChecks.Add(1)
		if e.readCheck == nil || e.readCheck.stamp == st {
			// One asked for (CheckAsRead) and started since would
			// count the same file again.
			e.readCheck, e.wantReadCheck = nil, false
		}
		return
	}
	if err == nil && st != rc.stamp && whole && e.readCheck == nil {
		e.wantReadCheck = true // changed meanwhile: counted again from the next read
	}
}

// Unready returns what stands between obj and its next passthrough open,
// if that is at most limit bytes: the byte ranges, in order and with
// adjacent blocks merged, of the blocks not cached and, while reads check
// it (CheckAsRead), of those they have not yet found good. Reading those ranges through the store (which
// fetches and caches what is missing, and counts what it reads) makes
// obj whole, or checked. Nothing (nil) if obj has no entry, nothing
// stands in the way, a read check was asked for but no read has started
// it, or more than limit bytes would be read.
func (s *Store) Unready(obj Key, limit int64) []ranges.ByteRange {
	if obj.Size == 0 {
		return nil
	}
	e := s.lockLookup(obj)
	defer s.mu.Unlock()
	if s.closed || e == nil {
		return nil
	}
	var ready bitmap
	var n int64
	switch missing := e.nblocks - e.present.count(); {
	case missing > 0:
		ready, n = e.present, missing
	case e.readCheck != nil:
		ready, n = e.readCheck.good, e.nblocks-e.readCheck.n
	default:
		return nil
	}
	if n == 0 || (n-1)*s.blockSize >= limit { // the object's last block may be short
		return nil
	}
	var out []ranges.ByteRange
	var total int64
	size := int64(e.obj.Size)
	for i := int64(0); i < e.nblocks; i++ {
		if i&63 == 0 && ready[i>>6] == ^uint64(0) {
			i += 63
			continue
		}
		if ready.get(i) {
			continue
		}
		off, end := i*s.blockSize, min((i+1)*s.blockSize, size)
		total += end - off
		if k := len(out) - 1; k >= 0 && out[k].Limit == uint64(off) {
			out[k].Limit = uint64(end)
		} else {
			out = append(out, ranges.ByteRange{Start: uint64(off), Limit: uint64(end)})
		}
	}
	if total > limit {
		return nil
	}
	return out
}
