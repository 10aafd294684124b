package filecache

import (
	"os"
	"sync"
)

// Spliced reads (Config.Splice).
//
// A read through the store copies the blocks out of the data file and
// checks each against its CRC32C. Spliceable lets a caller skip that for
// blocks that were read and found good since the store opened, while the
// data file has not changed since: the caller then sends the bytes
// straight from the data file's page cache (fs splices them to the
// kernel), and never reads them itself. This is the promise passthrough
// makes for files held whole (whole.go: checked once, then trusted while
// the file's stamp holds), made per block, for files cached in part.
//
// What it trusts: the data file's stamp (dev, inode, size, mtime, ctime)
// moves with every write to it through the file system, and no one can set
// ctime back. The store's own writes move it too; wroteLocked follows them
// (a write alone on its entry carries the stamp over, concurrent or failed
// writes drop what was checked). A write by anyone else, a truncation or a
// file replaced, is seen at the next Spliceable, which then drops every
// checked block of the file; they are read and checked again. What it does
// not see is what passthrough does not see either: a disk that returns
// other bytes than were written without the file changing, and a write
// that leaves the timestamps as they were (a file system with coarse
// timestamps, within one tick of the last change). Nor a write by someone
// else while one of the store's own writes to the file is under way
// (between the fstats around it), which the store takes for its own.

// markCheckedLocked records the blocks of e that ReadBlocks read from
// first on (ok[i]: block first+i passed its CRC, want[i]) while the data
// file showed stamp, taken before the read.
// LOCKS_REQUIRED(s.mu)
func (s *Store) markCheckedLocked(e *entry, stamp fileStamp, first int64, ok []bool, want []uint32) {
	if !e.live {
		return
	}
	if e.checkedStamp != stamp {
		// The file changed (or nothing was checked yet): what was
		// checked before is not known to hold.
		e.checked, e.checkedStamp = nil, stamp
	}
	for i, good := range ok {
		idx := first + int64(i)
		if !good || !e.present.get(idx) || e.crcs[idx] != want[i] {
			continue
		}
		if e.checked == nil {
			e.checked = newBitmap(e.nblocks)
		}
		e.checked.set(idx)
	}
}

// wroteLocked follows a write by the store to e's data file: before and
// after are the file's stamps around it (stamped: both were taken), ok
// that it wrote all it meant to. The write's own change is carried over if
// nothing else wrote in the meantime: no other store write in flight, and
// before is the stamp the checked blocks were checked under; otherwise
// nothing checked is kept. A failed write may have torn a block it
// rewrote: nothing is kept either.
// LOCKS_REQUIRED(s.mu)
func (s *Store) wroteLocked(e *entry, before, after fileStamp, stamped, ok bool) {
	if e.checked == nil && e.checkedStamp == (fileStamp{}) {
		return
	}
	if ok && stamped && e.writing == 0 && before == e.checkedStamp {
		e.checkedStamp = after
		return
	}
	e.checked, e.checkedStamp = nil, fileStamp{}
}

// Spliceable returns obj's data file if every block holding [off, off+n)
// was read from it and found good since the store opened (or since the
// file last changed), so that the caller may send those bytes from the
// file without reading them: they are at the same offsets in the file as
// in the object. The entry is pinned until release is called (once, after
// the last use of the file); meanwhile it is not evicted and its file not
// closed. It fails for a range not wholly checked, and while a read check
// runs (CheckAsRead), whose count needs the reads to go through
// ReadBlocks. It fstats the file: a file changed behind the store's back
// loses every checked block.
func (s *Store) Spliceable(obj Key, off, n int64) (f *os.File, release func(), ok bool) {
	if !s.splice || off < 0 || n <= 0 || off+n > int64(obj.Size) {
		return nil, nil, false
	}
	b0, b1 := off/s.blockSize, (off+n-1)/s.blockSize
	e := s.lockLookup(obj)
	if s.closed || e == nil || e.checked == nil || e.wantReadCheck || e.readCheck != nil {
		s.mu.Unlock()
		return nil, nil, false
	}
	for i := b0; i <= b1; i++ {
		if !e.checked.get(i) {
			s.mu.Unlock()
			return nil, nil, false
		}
	}
	stamp := e.checkedStamp
	e.pins++
	s.useLocked(e, n, false)
	s.mu.Unlock()

	var once sync.Once
	release = func() { once.Do(func() { s.unpin(e) }) }
	f, err := s.fileFor(e, false)
	var now fileStamp
	if err == nil {
		now, err = stampOf(f)
	}
	if err != nil || now != stamp {
		s.mu.Lock()
		if e.checkedStamp == stamp {
			e.checked, e.checkedStamp = nil, fileStamp{}
		}
		s.mu.Unlock()
		release()
		return nil, nil, false
	}
	blocks, bytes := b1-b0+1, min((b1+1)*s.blockSize, int64(obj.Size))-b0*s.blockSize
	s.hitBlocks.Add(blocks)
	s.hitBytes.Add(bytes)
	s.splicedBlocks.Add(blocks)
	s.splicedBytes.Add(bytes)
	return f, release, true
}
