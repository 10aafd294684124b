package filecache

import (
	"hash/crc32"
	"os"
	"slices"
	"sync"
	"syscall"

	"ferry/bucket"
)

// fileStamp identifies a data file and its last change: any write to it
// (through the file system, by anyone) moves its ctime, which no one can
// set back. The zero stamp is "never checked".
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func stampOf(f *os.File) (fileStamp, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return fileStamp{}, err
	}
	return fileStamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, nil
}

// wholeBufs are Whole's read buffers: 256 KiB, so that the bytes the CRC
// reads are still in the CPU's cache from the copy (a larger buffer made
// every opened 128 KiB file touch megabytes of fresh memory).
var wholeBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// Whole is for handing an object's data file to someone who reads it
// without the store (the kernel, through FUSE passthrough): it returns
// the file if every block of obj is cached and checked, and a release
// that must be called once the file is no longer read. Until then the
// entry is pinned: an eviction waits to unlink the file, and the blocks
// are not rewritten (they are all present). The caller must not close
// the file; it may be shared.
//
// Every block is checked against its CRC32C the first time, and again
// whenever the file has changed since (its stamp: inode, size, mtime and
// ctime); a block that fails is dropped, counted and logged as ReadBlocks
// does, and ok is false. What this cannot see is a change below the file
// system (a disk that silently returns other bytes than it was given for
// a file no one wrote to): those bytes would be read unchecked until the
// next process's first check. ReadBlocks checks every read instead.
func (s *Store) Whole(obj *bucket.Object) (f *os.File, release func(), ok bool) {
	if obj == nil || obj.Size == 0 {
		return nil, nil, false
	}
	s.mu.Lock()
	e := s.lookupLocked(obj)
	if s.closed || e == nil || e.present.count() != e.nblocks {
		s.mu.Unlock()
		return nil, nil, false
	}
	e.pins++
	s.touchLocked(e)
	verified := e.verified
	s.mu.Unlock()
	release = func() {
		s.mu.Lock()
		finish := s.unpinLocked(e)
		s.mu.Unlock()
		if finish {
			s.finishEvictions([]*entry{e})
		}
	}
	f, err := s.fileFor(e, false)
	if err != nil {
		release()
		return nil, nil, false
	}
	before, err := stampOf(f)
	if err != nil {
		release()
		return nil, nil, false
	}
	if before == verified {
		return f, release, true
	}
	// A file cut short is checked too, so that its lost blocks are
	// dropped now; a longer one (appended to behind our back) may hold
	// good blocks, but the kernel would read past the object's end.
	if !s.checkWhole(e, f, obj) || before.size != int64(obj.Size) {
		release()
		return nil, nil, false
	}
	after, err := stampOf(f)
	if err != nil || after != before { // written while we read it
		release()
		return nil, nil, false
	}
	s.wholeChecks.Add(1)
	s.wholeCheckedBytes.Add(int64(obj.Size))
	s.mu.Lock()
	e.verified = before
	s.mu.Unlock()
	return f, release, true
}

// checkWhole reads every block of e (pinned, all present) from f and
// checks its CRC; blocks that fail are dropped.
func (s *Store) checkWhole(e *entry, f *os.File, obj *bucket.Object) bool {
	s.mu.Lock()
	want := slices.Clone(e.crcs)
	s.mu.Unlock()
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
