package filecache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The index is one bbolt file with three buckets keyed by the entry's hex
// key (record.go has the records' format):
//
//	entries: name, version, size, block size, chunk 0 of bitmap and CRCs
//	chunks:  the other chunks, keyed by entry key and chunk number
//	atime:   last access, unix nanoseconds (8 bytes)
//
// Last access lives apart because every cache hit updates it: keeping it
// out of the entry value means an epoch of reads rewrites 8 bytes per
// object, not each object's bitmap and CRC array.
var (
	entriesBucket = []byte("entries")
	atimeBucket   = []byte("atime")
)

// loadedEntry is one row read from the index at open.
type loadedEntry struct {
	key   string
	rec   *record
	atime int64
	// lostChunks: chunks of rec found damaged and deleted; their blocks
	// are absent.
	lostChunks int
}

// errIndexDamaged: bbolt panicked, or faulted reading its memory map, on
// a damaged page. Seen at open, the index is moved aside; seen in a later
// commit, it is rebuilt from memory (see Store.rebuildIndex).
var errIndexDamaged = errors.New("cache index damaged")

// guard runs fn, an index operation, and turns bbolt's panics on damaged
// pages into errIndexDamaged. Damage can also make bbolt read outside its
// memory map, which kills a Go process outright ("fatal error: fault")
// unless the goroutine asked for a panic instead: guard asks, for fn's
// duration. Without this a damaged index crashed ferry at every start.
func guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", errIndexDamaged, r)
		}
	}()
	return fn()
}

// envError reports whether err, from opening the index, says something
// about the machine (permissions, a read-only or full volume, no
// descriptors or memory) rather than about the file's contents. Such an
// index is left alone: moving it aside would throw a good cache away.
func envError(err error) bool {
	if errors.Is(err, fs.ErrPermission) {
		return true
	}
	// Not EIO: an index that cannot be read is moved aside like a
	// corrupt one, so that it never stops the mount.
	for _, e := range []syscall.Errno{syscall.EROFS, syscall.ENOSPC, syscall.EDQUOT, syscall.EMFILE,
		syscall.ENFILE, syscall.ENOMEM, syscall.ELOOP, syscall.ENOTDIR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// openIndex opens (or creates) the bbolt index at path and reads every
// entry. A file bbolt cannot open or walk is corrupt: it is moved aside to
// path+".corrupt" and a fresh index started, because a damaged cache must
// never stop the mount; the data files it described become orphans and
// are removed by the caller. Records that do not decode are returned in
// bad so the caller deletes them. A lock held by another process (two
// ferry processes must not share one cache directory) and an index the
// machine will not let us open (envError) are errors, and nothing is
// moved or deleted.
func openIndex(path string, logf func(msg string, args ...any)) (db *bolt.DB, rows []loadedEntry, bad []string, err error) {
	// bbolt checks an index in a goroutine of its own, where a fault on a
	// damaged page kills the process (guard cannot reach it). A marker
	// left by an open that never finished says so at the next start,
	// which moves the index aside rather than die on it again. (The
	// caller holds the directory's lock: no other process is opening.)
	marker := path + ".opening"
	if _, err := os.Lstat(marker); err == nil {
		if err := moveAside(path, logf, "cache index: the last start died opening it; moving it aside and starting an empty cache",
			errors.New("open did not finish")); err != nil {
			return nil, nil, nil, err
		}
	}
	mf, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open cache index %s: %w", path, err)
	}
	mf.Close()
	defer os.Remove(marker)
	for attempt := 0; attempt < 2; attempt++ {
		db, rows, bad, err = tryOpenIndex(path)
		if err == nil {
			return db, rows, bad, nil
		}
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, nil, nil, fmt.Errorf("cache index %s is locked by another process: %w", path, err)
		}
		if envError(err) && !errors.Is(err, errIndexDamaged) {
			return nil, nil, nil, fmt.Errorf("open cache index %s: %w", path, err)
		}
		if attempt == 1 {
			break
		}
		if err := moveAside(path, logf, "cache index is corrupt; moving it aside and starting an empty cache", err); err != nil {
			return nil, nil, nil, err
		}
	}
	return nil, nil, nil, fmt.Errorf("open cache index %s: %w", path, err)
}

// moveAside moves the corrupt index at path to path+".corrupt" (one
// earlier copy is replaced), or removes it if it cannot be moved.
func moveAside(path string, logf func(msg string, args ...any), msg string, why error) error {
	aside := path + ".corrupt"
	logf(msg, "path", path, "moved_to", aside, "err", why)
	if rerr := os.Rename(path, aside); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		if rerr := os.Remove(path); rerr != nil {
			return fmt.Errorf("remove corrupt cache index: %w", rerr)
		}
	}
	return nil
}

// openNoFollow opens the index file itself, never a symbolic link put in
// its place (a root ferry would otherwise write wherever it points).
func openNoFollow(name string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag|syscall.O_NOFOLLOW, perm)
}

// tryOpenIndex opens and reads the index under guard: bbolt's panics on
// damaged pages are how it reports some kinds of corruption. After a
// panic the half-open database is not closed but dropped: the panic may
// have left bbolt's writer lock held, and Close would wait for it
// forever (see Store.rebuildIndex). Its flock goes with the file, which
// the caller moves aside.
func tryOpenIndex(path string) (db *bolt.DB, rows []loadedEntry, bad []string, err error) {
	err = guard(func() error {
		db, rows, bad, err = readIndex(path)
		return err
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return db, rows, bad, nil
}

// readIndex opens the index and reads every entry. It closes the database
// on the errors it returns (not on a panic: see tryOpenIndex).
func readIndex(path string) (db *bolt.DB, rows []loadedEntry, bad []string, err error) {
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, OpenFile: openNoFollow})
	if err != nil {
		return nil, nil, nil, err
	}
	// A full consistency check (page types, reachability, freelist) costs
	// one walk of the index at mount and catches damage that would
	// otherwise surface as a panic in a later commit.
	err = db.View(func(tx *bolt.Tx) error {
		for cerr := range tx.Check() {
			if err == nil {
				err = cerr
			}
		}
		return err
	})
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		rows, bad, err = loadRows(tx)
		return err
	})
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	return db, rows, bad, nil
}

// loadRows reads every entry of the index, with its chunks, and deletes
// what belongs to no entry: access times and chunks left by a crash
// between two batches, or by an older ferry that wrote format 1 over a
// format 2 entry, and chunks found damaged. Rows are in key order.
func loadRows(tx *bolt.Tx) (rows []loadedEntry, bad []string, err error) {
	eb, err := tx.CreateBucketIfNotExists(entriesBucket)
	if err != nil {
		return nil, nil, err
	}
	cb, err := tx.CreateBucketIfNotExists(chunksBucket)
	if err != nil {
		return nil, nil, err
	}
	ab, err := tx.CreateBucketIfNotExists(atimeBucket)
	if err != nil {
		return nil, nil, err
	}
	// Entries of format 2 with more than one chunk, by key.
	chunked := map[string]int{}
	if err := eb.ForEach(func(k, v []byte) error {
		rec, derr := decodeRecord(k, v)
		if derr != nil || len(k) != 64 {
			bad = append(bad, string(k))
			return nil
		}
		var at int64
		if a := ab.Get(k); len(a) == 8 {
			at = int64(binary.LittleEndian.Uint64(a))
		}
		if rec.format == recordV2 && numChunks(numBlocks(rec.size, rec.blockSize)) > 1 {
			chunked[string(k)] = len(rows)
		}
		rows = append(rows, loadedEntry{key: string(k), rec: rec, atime: at})
		return nil
	}); err != nil {
		return nil, nil, err
	}
	var stray, strayChunks [][]byte
	if err := cb.ForEach(func(k, v []byte) error {
		i, ok := -1, len(k) == 68
		if ok {
			i, ok = chunked[string(k[:64])]
		}
		if !ok {
			strayChunks = append(strayChunks, append([]byte(nil), k...))
			return nil
		}
		r := &rows[i]
		n, c := numBlocks(r.rec.size, r.rec.blockSize), int64(binary.BigEndian.Uint32(k[64:]))
		body, sealed := unseal(k, v)
		if c == 0 || c >= numChunks(n) || !sealed || !readChunk(body, r.rec.present, r.rec.crcs, n, c) {
			r.lostChunks++
			strayChunks = append(strayChunks, append([]byte(nil), k...))
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	if err := ab.ForEach(func(k, _ []byte) error {
		if eb.Get(k) == nil {
			stray = append(stray, append([]byte(nil), k...))
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	for _, k := range stray {
		if err := ab.Delete(k); err != nil {
			return nil, nil, err
		}
	}
	for _, k := range strayChunks {
		if err := cb.Delete(k); err != nil {
			return nil, nil, err
		}
	}
	return rows, bad, nil
}

// deleteChunks deletes every chunk of the entry key from cb. A key that
// is not an entry's (a damaged row's) owns no chunk, and is not taken as
// a prefix: it could be the start of other entries' keys. Chunks whose
// entry is gone are deleted at open anyway.
func deleteChunks(cb *bolt.Bucket, key []byte) error {
	if len(key) != 64 {
		return nil
	}
	c := cb.Cursor()
	for k, _ := c.Seek(key); k != nil && bytes.HasPrefix(k, key); k, _ = c.Seek(key) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}
