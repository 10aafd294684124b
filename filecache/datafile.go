package filecache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openFiles are an entry's file descriptors, closed together.
type openFiles struct{ file, direct *os.File }

func (o openFiles) close() {
	for _, f := range []*os.File{o.file, o.direct} {
		if f != nil {
			f.Close()
		}
	}
}

// detachFileLocked forgets e's open files; the caller closes them
// outside the lock. LOCKS_REQUIRED(s.mu)
func (s *Store) detachFileLocked(e *entry) openFiles {
	o := openFiles{e.file, e.direct}
	if e.file != nil {
		s.open.Remove(e.openElem)
		e.openElem, e.file, e.direct = nil, nil, nil
	}
	return o
}

// fileFor returns e's open data file; the caller holds a pin on e, which
// keeps the file open. With create, a missing file (or directory) is
// created empty; the blocks recorded for the file that vanished are
// forgotten before anyone writes to the new one.
func (s *Store) fileFor(e *entry, create bool) (*os.File, error) {
	if f := s.openedFile(e); f != nil {
		return f, nil
	}
	e.opening.Lock()
	defer e.opening.Unlock()
	if f := s.openedFile(e); f != nil { // opened while we waited
		return f, nil
	}

	path := s.pathFor(e.key)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	created := false
	if errors.Is(err, fs.ErrNotExist) && create {
		if err = s.dirRemoved(); err == nil {
			err = os.MkdirAll(filepath.Dir(path), 0o700)
		}
		if err == nil {
			f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
			created = err == nil
			if errors.Is(err, fs.ErrExist) { // not ours to reset
				f, err = os.OpenFile(path, os.O_RDWR, 0)
			}
		}
	}
	if err != nil {
		return nil, err
	}

	s.mu.Lock()
	e.file = f
	e.openElem = s.open.PushFront(e)
	if created && e.live {
		// A new entry, or the file vanished (cache dir deleted) and was
		// recreated empty: no block recorded so far is in it.
		clear(e.present)
		clear(e.crcs)
		e.wantReadCheck, e.readCheck = false, nil
		e.checked, e.checkedStamp = nil, fileStamp{}
		s.unverifiedLocked(e)
		s.allocatedLocked(e, 0)
		// Every chunk is empty now: delete those the index holds, also
		// where the old file showed no blocks allocated (a crash before
		// its blocks reached the disk) while the index recorded some.
		clear(e.dirtyChunks)
		e.resetChunks = numChunks(e.nblocks) > 1
		s.markDirtyLocked(e, true)
	}
	toClose := s.trimOpenLocked()
	s.mu.Unlock()
	for _, c := range toClose {
		c.close()
	}
	return f, nil
}

// trimOpenLocked detaches the least recently used unpinned data files
// beyond maxOpen, for the caller to close outside the lock.
// LOCKS_REQUIRED(s.mu)
func (s *Store) trimOpenLocked() []openFiles {
	var toClose []openFiles
	for el := s.open.Back(); el != nil && s.open.Len() > s.hooks.maxOpen; {
		o := el.Value.(*entry)
		el = el.Prev()
		if o.pins == 0 {
			toClose = append(toClose, s.detachFileLocked(o))
		}
	}
	return toClose
}

// errNotRegular: an entry's data file is not a regular file.
var errNotRegular = errors.New("not a regular file")

// closeIfOpen closes f, if not nil.
func closeIfOpen(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// openDataFile opens the data file at path as fileFor does, and stats
// it: a warm needs both, and one walk of the path does for the two
// (the cache's directories hold thousands of files each). Anything but a
// regular file is refused.
func openDataFile(path string) (*os.File, *unix.Stat_t, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, nil, errNotRegular
	}
	return f, &st, nil
}

// openedFile returns e's data file if it is open, else nil.
func (s *Store) openedFile(e *entry) *os.File {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.file == nil {
		return nil
	}
	s.open.MoveToFront(e.openElem)
	return e.file
}

// directAlign is the alignment O_DIRECT needs of offsets, lengths and
// buffer addresses: the page size, which covers every logical block size
// in use.
const directAlign = 4096

// writeData writes p at off into e's file f (e pinned). Whole aligned
// pages go through O_DIRECT: the bytes are on their way to the reader
// already, and a copy in the page cache would cost a second copy, the
// kernel's writeback and memory the training job wants (the bytes are in
// the FUSE page cache too). The unaligned tail (an object's short last
// block) and volumes that refuse O_DIRECT use the page cache. It returns
// the bytes written, and how many of them with O_DIRECT.
func (s *Store) writeData(e *entry, f *os.File, p []byte, off int64) (n, direct int, err error) {
	m := len(p) &^ (directAlign - 1)
	if m > 0 && off%directAlign == 0 && uintptr(unsafe.Pointer(unsafe.SliceData(p)))%directAlign == 0 {
		if d := s.directFor(e, f); d != nil {
			w, err := s.hooks.writeAt(d, p[:m], off)
			switch {
			case err == nil:
				n, direct = w, w
			case w == 0 && errors.Is(err, syscall.EINVAL):
				// Direct I/O refused after all: the page cache from now on.
				s.noDirect.Store(true)
			default:
				return w, w, err
			}
		}
	}
	if n == len(p) {
		return n, direct, nil
	}
	w, err := s.hooks.writeAt(f, p[n:], off+int64(n))
	return n + w, direct, err
}

// directFor returns e's O_DIRECT descriptor for writing, opening it from
// f (e is pinned, so f stays e's file), or nil to write through f.
func (s *Store) directFor(e *entry, f *os.File) *os.File {
	if s.noDirect.Load() {
		return nil
	}
	s.mu.Lock()
	d := e.direct
	s.mu.Unlock()
	if d != nil {
		return d
	}
	// Reopen the very file f is (even if its name is gone), not its path.
	d, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_WRONLY|syscall.O_DIRECT, 0)
	if err != nil {
		// Refused (EINVAL), or no /proc: from now on through the page
		// cache. Anything else (out of descriptors) only for this write.
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, fs.ErrNotExist) {
			s.noDirect.Store(true)
			s.log.Info("cache writes go through the page cache: the cache volume refuses direct I/O", "err", err)
		}
		return nil
	}
	s.mu.Lock()
	if e.file != f || e.direct != nil { // another write opened one first
		existing := e.direct
		s.mu.Unlock()
		d.Close()
		return existing
	}
	e.direct = d
	s.mu.Unlock()
	return d
}
