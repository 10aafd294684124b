package filecache

import (
	"bufio"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// The entries' snapshot. Open needs every entry's key and size, in LRU
// order (cold.go). The index has them in its atime rows, but those rows'
// pages are spread over the whole file: after a reboot, reading them
// from a 790 MB index of 1.28M objects took 5-7 s of random reads on the
// development machine. So a clean Close writes them, in order, to one
// small file (48 bytes an entry), stamped with the index's last
// transaction, and the next Open reads that sequentially if the stamp
// still matches: nothing has committed since. A crash leaves no snapshot
// (or a stale one), and Open scans the index instead.
//
//	"FERRYSN2", txid uint64, n uint64, n × (key [32]byte, bytes uint64, row uint64), CRC32C of all before it
//
// (FERRYSN1, of the first index format, had no rows; it is not read.)
const snapshotName = "entries.snapshot"

var snapshotMagic = []byte("FERRYSN2")

// snapshotRow is the length of an entry in the snapshot.
const snapshotRow = 48

// writeSnapshot writes the entries in LRU order, least recent first,
// stamped with the index's transaction. It runs in Close, after the last
// commit.
func (s *Store) writeSnapshot() error {
	if s.db == nil {
		return errors.New("no index")
	}
	var txid int
	if err := guard(func() error {
		return s.db.View(func(tx *bolt.Tx) error { txid = tx.ID(); return nil })
	}); err != nil {
		return err
	}
	path := filepath.Join(s.dir, snapshotName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		os.Remove(tmp)
		f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_EXCL, 0o600)
	}
	if err != nil {
		return err
	}
	h := crc32.New(castagnoli)
	w := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
	s.mu.Lock()
	n := s.cold.len() + s.lru.Len()
	var hdr [24]byte
	copy(hdr[:8], snapshotMagic)
	binary.LittleEndian.PutUint64(hdr[8:], uint64(txid))
	binary.LittleEndian.PutUint64(hdr[16:], uint64(n))
	w.Write(hdr[:])
	var row [snapshotRow]byte
	put := func(sl coldSlot) {
		copy(row[:32], sl.key[:])
		binary.LittleEndian.PutUint64(row[32:], uint64(sl.bytes))
		binary.LittleEndian.PutUint64(row[40:], sl.row)
		w.Write(row[:])
	}
	s.cold.each(put)
	for el := s.lru.Back(); el != nil; el = el.Prev() {
		e := el.Value.(*entry)
		k, _ := coldKeyOf(e.key)
		put(coldSlot{key: k, row: e.row, bytes: e.bytes})
	}
	s.mu.Unlock()
	err = w.Flush()
	if err == nil {
		_, err = f.Write(binary.LittleEndian.AppendUint32(nil, h.Sum32()))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// readSnapshot returns the entries of the snapshot in dir, least recent
// first, if it is whole and stamped with transaction txid; false
// otherwise. The snapshot is removed either way: it describes the index
// only until the next commit.
func readSnapshot(dir string, txid int) ([]coldRow, bool) {
	path := filepath.Join(dir, snapshotName)
	raw, err := os.ReadFile(path)
	os.Remove(path)
	if err != nil || len(raw) < 28 {
		return nil, false
	}
	body, sum := raw[:len(raw)-4], binary.LittleEndian.Uint32(raw[len(raw)-4:])
	if string(body[:8]) != string(snapshotMagic) || crc32.Checksum(body, castagnoli) != sum ||
		binary.LittleEndian.Uint64(body[8:]) != uint64(txid) {
		return nil, false
	}
	n := binary.LittleEndian.Uint64(body[16:])
	body = body[24:]
	if uint64(len(body)) != n*snapshotRow {
		return nil, false
	}
	rows := make([]coldRow, n)
	for i := range rows {
		r := body[snapshotRow*i : snapshotRow*(i+1)]
		copy(rows[i].key[:], r[:32])
		rows[i].atime = int64(i) // the order is the snapshot's
		rows[i].bytes = min(int64(binary.LittleEndian.Uint64(r[32:])), 1<<62)
		rows[i].row = binary.LittleEndian.Uint64(r[40:])
	}
	return rows, true
}
