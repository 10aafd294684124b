package filecache

import (
	"bytes"
	"crypto/sha256"
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
//	ROW 'c'   2, digest, seal
//
// The digest is the first 16 bytes of the SHA-256 of the boot ID and the
// stamp (dev, inode, size, mtime and ctime): a warm has the file's stamp
// from its open, and trusts the check if the two hash alike. Rows of the
// first format, still read, held both in full (the boot ID as text),
// which made the checked rows a third of a large index:
//
//	ROW 'c'   1, boot ID, dev, inode, size, mtime and ctime (s, ns), seal
//
// The row lives apart from the entry's record (record.go), next to it
// (index.go), so that a check writes one small row and not the record.
// A missing row, one sealed wrong, of another format, of
// another boot, or for another size than the object's is no check: the
// file is checked again, as by a new process before.
const (
	checkedV1 = 1
	checkedV2 = 2

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

// checkedLen is a first-format row's length after the boot ID, without
// its seal.
const checkedLen = 7 * 8

// checkDigest is what a checked row keeps of a check: the digest of the
// boot and the file's stamp then. The zero digest is no check.
type checkDigest [16]byte

// digestOf is the digest of a check of the file at st in boot.
func digestOf(boot string, st fileStamp) (d checkDigest) {
	var b [64 + checkedLen]byte // a boot ID is 36 bytes: on the stack
	buf := append(b[:0], boot...)
	for _, x := range []uint64{st.dev, st.ino, uint64(st.size),
		uint64(st.mtime.Sec), uint64(st.mtime.Nsec), uint64(st.ctime.Sec), uint64(st.ctime.Nsec)} {
		buf = binary.LittleEndian.AppendUint64(buf, x)
	}
	sum := sha256.Sum256(buf)
	copy(d[:], sum[:])
	return d
}

// matches reports whether d is a check, in boot (not empty), of the data
// file of an object of size bytes that now shows st.
func (d checkDigest) matches(boot string, st fileStamp, size uint64) bool {
	return d != checkDigest{} && boot != "" && st.size >= 0 && uint64(st.size) == size &&
		digestOf(boot, st) == d
}

// encodeChecked is the checked row of a file checked at st in boot, without
// its seal (the commit adds it).
func encodeChecked(boot string, st fileStamp) []byte {
	d := digestOf(boot, st)
	return append([]byte{checkedV2}, d[:]...)
}

// decodeChecked returns the digest the checked row v (sealed, under key)
// records, if it is well formed; one of the first format also only if it
// is of boot and of a file of size bytes. Otherwise the zero digest: the
// file counts as not checked.
func decodeChecked(key, v []byte, boot string, size uint64) checkDigest {
	body, ok := unseal(key, v)
	if !ok || boot == "" || len(body) < 1 {
		return checkDigest{}
	}
	switch {
	case body[0] == checkedV2 && len(body) == 1+len(checkDigest{}):
		return checkDigest(body[1:])
	case body[0] != checkedV1:
		return checkDigest{}
	}
	rr := &recordReader{v: body[1:], ok: true}
	if rr.str() != boot || !rr.ok || len(rr.v) != checkedLen {
		return checkDigest{}
	}
	var x [7]uint64
	for i := range x {
		x[i] = binary.LittleEndian.Uint64(rr.v[8*i:])
	}
	st := fileStamp{dev: x[0], ino: x[1], size: int64(x[2])}
	st.mtime.Sec, st.mtime.Nsec = int64(x[3]), int64(x[4])
	st.ctime.Sec, st.ctime.Nsec = int64(x[5]), int64(x[6])
	if st.size < 0 || uint64(st.size) != size || st == (fileStamp{}) {
		return checkDigest{}
	}
	return digestOf(boot, st)
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
