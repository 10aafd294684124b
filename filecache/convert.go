package filecache

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// Index format 1, and its conversion. Format 1 keyed an entry's rows by
// its hex key (64 bytes), in a bucket for each kind of row:
//
//	entries/KEY          the record (record.go), sealed under KEY
//	chunks/KEY BE32(i)   chunk i, sealed under its key
//	atime/KEY            access time, and allocated bytes if 16 bytes long
//	checked/KEY          the last check (checked.go), sealed under KEY
//
// Keys that are hashes put each new row on a leaf of the B+tree at
// random: at 1.28M objects a cold epoch's commits rewrote a 4 KiB page
// for nearly every row, a quarter of ferry's CPU, and a warm read three
// leaves. Open converts such an index once into format 2 (index.go):
// entries numbered least recently used first, every row sealed again
// under its new key. A damaged row is not carried over: a record's loses
// the entry, a chunk's its blocks. The new index is written beside the
// old one and renamed over it, so a conversion cut short leaves the old
// index, converted again at the next Open (the start's marker, see
// openIndex, is gone by then). A volume without room for the new file
// drops the old index instead: the cache starts empty, and removing its
// files as orphans makes the room.
var (
	v1Entries = []byte("entries")
	v1Chunks  = []byte("chunks")
	v1Atime   = []byte("atime")
	v1Checked = []byte("checked")
)

// convertBatch is how many entries one transaction of the conversion
// writes.
const convertBatch = 4096

// convertIndex converts db, the index at path, from format 1 if it is in
// it, and returns the index to use with how many entries it converted.
// fileBytes gives the allocated bytes of an entry's data file, for
// atime rows that predate them (-1: the file is gone, and so is the
// entry). On an error the returned database is db, still open, or nil
// if db was closed.
func convertIndex(db *bolt.DB, path string, fileBytes func(key string) int64) (*bolt.DB, int, error) {
	var rows []coldRow
	old := false
	err := db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(v1Atime) == nil && tx.Bucket(v1Entries) == nil {
			return nil
		}
		old = true
		rows = scanV1Atimes(tx.Bucket(v1Atime))
		return nil
	})
	tmp := path + ".convert"
	if err != nil || !old {
		os.Remove(tmp)
		return db, 0, err
	}
	prefetch(db)
	// Least recent first: the order Open queues them in, and the order
	// eviction deletes them in, from the tree's start.
	slices.SortStableFunc(rows, func(a, b coldRow) int { return cmp.Compare(a.atime, b.atime) })
	os.Remove(tmp)
	n, err := writeConverted(db, tmp, rows, fileBytes)
	if err != nil {
		os.Remove(tmp)
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return dropUnconverted(db, path)
		}
		return db, 0, err
	}
	if err := db.Close(); err != nil {
		os.Remove(tmp)
		return nil, 0, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nil, 0, err
	}
	db, err = openBolt(path, false)
	return db, n, err
}

// dropUnconverted replaces db, the index at path that could not be
// converted for want of room, with an empty one, and returns it with -1
// converted: the cache starts empty and its files are removed as orphans
// (tidy.go), which makes room. Failing the Open instead would run ferry
// without its disk cache at every start, the full volume never freed.
func dropUnconverted(db *bolt.DB, path string) (*bolt.DB, int, error) {
	if err := db.Close(); err != nil {
		return nil, 0, err
	}
	os.Remove(filepath.Join(filepath.Dir(path), snapshotName))
	if err := os.Remove(path); err != nil {
		return nil, 0, err
	}
	db, err := openBolt(path, false)
	return db, -1, err
}

// scanV1Atimes reads format 1's atime rows; bytes is -1 where a row
// predates them. Keys that are no entry's are passed over: their rows
// are not converted.
func scanV1Atimes(ab *bolt.Bucket) (rows []coldRow) {
	if ab == nil {
		return nil
	}
	c := ab.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		ck, ok := coldKeyOf(string(k))
		if !ok || len(v) < 8 {
			continue
		}
		r := coldRow{key: ck, atime: int64(binary.LittleEndian.Uint64(v)), bytes: -1}
		if len(v) == 16 {
			r.bytes = min(int64(binary.LittleEndian.Uint64(v[8:])), 1<<62)
		}
		rows = append(rows, r)
	}
	return rows
}

// writeConverted writes rows' entries from db, in format 2, into a new
// index at tmp, numbered in order from 1, and returns how many it wrote.
func writeConverted(db *bolt.DB, tmp string, rows []coldRow, fileBytes func(key string) int64) (int, error) {
	// Synced once at the end: a conversion cut short is started again.
	ndb, err := openBolt(tmp, true)
	if err != nil {
		return 0, err
	}
	n := 0
	next := uint64(1)
	err = ndb.Update(func(ntx *bolt.Tx) error {
		if _, err := ntx.CreateBucket(rowsBucket); err != nil {
			return err
		}
		mb, err := ntx.CreateBucket(metaBucket)
		if err != nil {
			return err
		}
		return db.View(func(tx *bolt.Tx) error {
			if ob := tx.Bucket(metaBucket); ob != nil && ob.Get(blockSizeKey) != nil {
				return mb.Put(blockSizeKey, bytes.Clone(ob.Get(blockSizeKey)))
			}
			return nil
		})
	})
	for len(rows) > 0 && err == nil {
		batch := rows[:min(len(rows), convertBatch)]
		rows = rows[len(batch):]
		err = ndb.Update(func(ntx *bolt.Tx) error {
			nb := ntx.Bucket(rowsBucket)
			return db.View(func(tx *bolt.Tx) error {
				for _, r := range batch {
					if r.bytes < 0 && fileBytes != nil {
						r.bytes = fileBytes(r.key.String())
					}
					ok, err := convertEntry(tx, nb, r, next)
					if err != nil {
						return err
					}
					if ok {
						n++
						next++
					}
				}
				return nil
			})
		})
	}
	if err == nil {
		err = ndb.Sync()
	}
	if cerr := ndb.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// convertEntry writes the entry r of tx (format 1) into nb at row, and
// reports whether it did: an entry without a good record, or whose file
// is gone, is left out.
func convertEntry(tx *bolt.Tx, nb *bolt.Bucket, r coldRow, row uint64) (bool, error) {
	eb := tx.Bucket(v1Entries)
	if eb == nil || r.bytes < 0 {
		return false, nil
	}
	k := []byte(r.key.String())
	v := eb.Get(k)
	if len(v) == 0 {
		return false, nil
	}
	rec := bytes.Clone(v) // format 1's record: unsealed, read as it is
	if v[0] == recordV2 {
		body, ok := unseal(k, v)
		if !ok {
			return false, nil
		}
		rec = seal(rowKey(row, tagEntry), bytes.Clone(body))
	}
	put := func(nk, body []byte) error { return nb.Put(nk, seal(nk, bytes.Clone(body))) }
	if err := put(rowKey(row, tagAtime), encodeAtime(r.atime, r.bytes, r.key)); err != nil {
		return false, err
	}
	if err := nb.Put(rowKey(row, tagEntry), rec); err != nil {
		return false, err
	}
	if kb := tx.Bucket(v1Checked); kb != nil {
		if body, ok := unseal(k, kb.Get(k)); ok {
			if err := put(rowKey(row, tagChecked), body); err != nil {
				return false, err
			}
		}
	}
	cb := tx.Bucket(v1Chunks)
	if cb == nil {
		return true, nil
	}
	c := cb.Cursor()
	for ck, cv := c.Seek(k); ck != nil && bytes.HasPrefix(ck, k); ck, cv = c.Next() {
		body, ok := unseal(ck, cv)
		if len(ck) != len(k)+4 || !ok {
			continue
		}
		if err := put(chunkKey(row, int64(binary.BigEndian.Uint32(ck[len(k):]))), body); err != nil {
			return false, err
		}
	}
	return true, nil
}
