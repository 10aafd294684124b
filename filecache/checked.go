package filecache

import (
	"bytes"
	"encoding/binary"
	"os"
)

// Checks kept across restarts. A file found whole and good (WholeFile.Check,
// or reads that covered it: CheckAsRead) is trusted, without being read
// again, while its data file shows the stamp it had then (entry.verified):
// within one boot, a file whose stamp has not moved has not been written
// to, since every write, truncation, fallocate or hole punched moves the
// ctime, which no one can set back. That holds across ferry processes as
// well as within one, so the stamp is kept in the index, with the boot it
// was taken in, and a restart in the same boot starts from it: the
// file's first open in the new process may be passthrough at once. After
// a reboot nothing is trusted: a reboot may follow a power cut, after
// which a file may hold torn writes under a stamp that did not move.
//
//	checked/KEY   1, boot ID, dev, inode, size, mtime and ctime (s, ns), seal
//
// The row lives apart from the entry's record (record.go) so that a check
// writes one small row and not the record, and so that a ferry that does
// not know the rows (they came later) loads the records as before,
// ignoring them. A missing row, one sealed wrong, of another format, of
// another boot, or for another size than the object's is no check: the
// file is checked again, as by a new process before.
var checkedBucket = []byte("checked")

const (
	checkedV1 = 1

	// bootIDPath changes at every boot of the machine.
	bootIDPath = "/proc/sys/kernel/random/boot_id"
)

// readBootID is the machine's boot ID, or "" if it cannot be read: then
// no check is kept, nor trusted, across processes.
func readBootID() string {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// checkedLen is a row's length after the boot ID, without its seal.
const checkedLen = 7 * 8

// encodeChecked is the checked row of a file checked at st in boot, without
// its seal (the commit adds it).
func encodeChecked(boot string, st fileStamp) []byte {
	buf := make([]byte, 0, 2+len(boot)+checkedLen+4)
	buf = append(buf, checkedV1)
	buf = binary.AppendUvarint(buf, uint64(len(boot)))
	buf = append(buf, boot...)
	for _, x := range []uint64{st.dev, st.ino, uint64(st.size),
		uint64(st.mtime.Sec), uint64(st.mtime.Nsec), uint64(st.ctime.Sec), uint64(st.ctime.Nsec)} {
		buf = binary.LittleEndian.AppendUint64(buf, x)
	}
	return buf
}

// decodeChecked returns the stamp the checked row v (sealed, under key)
// records, if it is well formed, of boot (not empty) and of a file of
// size bytes; otherwise false: the file counts as not checked.
func decodeChecked(key, v []byte, boot string, size uint64) (fileStamp, bool) {
	body, ok := unseal(key, v)
	if !ok || boot == "" || len(body) < 1 || body[0] != checkedV1 {
		return fileStamp{}, false
	}
	rr := &recordReader{v: body[1:], ok: true}
	if rr.str() != boot || !rr.ok || len(rr.v) != checkedLen {
		return fileStamp{}, false
	}
	var x [7]uint64
	for i := range x {
		x[i] = binary.LittleEndian.Uint64(rr.v[8*i:])
	}
	st := fileStamp{dev: x[0], ino: x[1], size: int64(x[2])}
	st.mtime.Sec, st.mtime.Nsec = int64(x[3]), int64(x[4])
	st.ctime.Sec, st.ctime.Nsec = int64(x[5]), int64(x[6])
	if st.size < 0 || uint64(st.size) != size || st == (fileStamp{}) {
		return fileStamp{}, false
	}
	return st, true
}

// verifiedLocked records that e's data file was found whole and good while
// it showed st, for the next commit to keep. LOCKS_REQUIRED(s.mu)
func (s *Store) verifiedLocked(e *entry, st fileStamp) {
	e.verified = st
	s.checkedDirtyLocked(e)
}

// unverifiedLocked forgets e's check: its file is being written to, or
// was made again. LOCKS_REQUIRED(s.mu)
func (s *Store) unverifiedLocked(e *entry) {
	if e.verified != (fileStamp{}) {
		e.verified = fileStamp{}
		s.checkedDirtyLocked(e)
	}
}

// checkedDirtyLocked marks e's checked row for the next commit, if the
// rows are kept at all (a boot ID is known). LOCKS_REQUIRED(s.mu)
func (s *Store) checkedDirtyLocked(e *entry) {
	if e.live && s.bootID != "" {
		e.checkedDirty = true
		s.dirty[e.key] = e
	}
}

// takeCheckedLocked is e's checked row to write, or nil to delete it.
// LOCKS_REQUIRED(s.mu)
func (s *Store) takeCheckedLocked(e *entry) []byte {
	if e.verified == (fileStamp{}) || uint64(e.verified.size) != e.obj.Size {
		return nil
	}
	return encodeChecked(s.bootID, e.verified)
}
