package filecache

import (
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

// The index is one bbolt file with two buckets keyed by the entry's hex key:
//
//	entries: name, version, size, block size, allocated bytes, bitmap, CRCs
//	atime:   last access, unix nanoseconds (8 bytes)
//
// Last access lives apart because every cache hit updates it: keeping it
// out of the entry value means an epoch of reads rewrites 8 bytes per
// object, not each object's bitmap and CRC array.
var (
	entriesBucket = []byte("entries")
	atimeBucket   = []byte("atime")
)

const entryFormat = 1

// record is the persistent part of an entry.
type record struct {
	name, version string
	size          uint64
	blockSize     int64
	bytes         int64
	present       bitmap
	crcs          []uint32
}

func encodeRecord(r *record) []byte {
	buf := make([]byte, 0, 64+len(r.name)+len(r.version)+8*len(r.present)+4*len(r.crcs))
	buf = append(buf, entryFormat)
	buf = binary.AppendUvarint(buf, uint64(len(r.name)))
	buf = append(buf, r.name...)
	buf = binary.AppendUvarint(buf, uint64(len(r.version)))
	buf = append(buf, r.version...)
	buf = binary.AppendUvarint(buf, r.size)
	buf = binary.AppendUvarint(buf, uint64(r.blockSize))
	buf = binary.AppendUvarint(buf, uint64(r.bytes))
	for _, w := range r.present {
		buf = binary.LittleEndian.AppendUint64(buf, w)
	}
	for _, c := range r.crcs {
		buf = binary.LittleEndian.AppendUint32(buf, c)
	}
	return buf
}

var errBadRecord = errors.New("malformed index record")

func decodeRecord(v []byte) (*record, error) {
	if len(v) < 1 || v[0] != entryFormat {
		return nil, errBadRecord
	}
	v = v[1:]
	str := func() (string, bool) {
		n, k := binary.Uvarint(v)
		if k <= 0 || n > uint64(len(v)-k) {
			return "", false
		}
		s := string(v[k : k+int(n)])
		v = v[k+int(n):]
		return s, true
	}
	num := func() (uint64, bool) {
		n, k := binary.Uvarint(v)
		if k <= 0 {
			return 0, false
		}
		v = v[k:]
		return n, true
	}
	r := &record{}
	var ok1, ok2, ok3, ok4, ok5 bool
	var bs, by uint64
	r.name, ok1 = str()
	r.version, ok2 = str()
	r.size, ok3 = num()
	bs, ok4 = num()
	by, ok5 = num()
	if !(ok1 && ok2 && ok3 && ok4 && ok5) || validateBlockSize(int64(bs)) != nil || by > 1<<62 {
		return nil, errBadRecord
	}
	r.blockSize, r.bytes = int64(bs), int64(by)
	n := numBlocks(r.size, r.blockSize)
	words := (n + 63) / 64
	if uint64(len(v)) != uint64(words)*8+uint64(n)*4 {
		return nil, errBadRecord
	}
	r.present = make(bitmap, words)
	for i := range r.present {
		r.present[i] = binary.LittleEndian.Uint64(v[8*i:])
	}
	v = v[8*words:]
	r.crcs = make([]uint32, n)
	for i := range r.crcs {
		r.crcs[i] = binary.LittleEndian.Uint32(v[4*i:])
	}
	// Bits past the end would break bitmap's invariant.
	if n%64 != 0 && words > 0 && r.present[words-1]>>(uint64(n)%64) != 0 {
		return nil, errBadRecord
	}
	return r, nil
}

// loadedEntry is one row read from the index at open.
type loadedEntry struct {
	key   string
	rec   *record
	atime int64
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
		eb, err := tx.CreateBucketIfNotExists(entriesBucket)
		if err != nil {
			return err
		}
		ab, err := tx.CreateBucketIfNotExists(atimeBucket)
		if err != nil {
			return err
		}
		if err := eb.ForEach(func(k, v []byte) error {
			rec, derr := decodeRecord(v)
			if derr != nil || len(k) != 64 {
				bad = append(bad, string(k))
				return nil
			}
			var at int64
			if a := ab.Get(k); len(a) == 8 {
				at = int64(binary.LittleEndian.Uint64(a))
			}
			rows = append(rows, loadedEntry{key: string(k), rec: rec, atime: at})
			return nil
		}); err != nil {
			return err
		}
		// Access times without an entry are left over from a crash
		// between two batches; drop them so the index does not grow.
		var stray [][]byte
		if err := ab.ForEach(func(k, _ []byte) error {
			if eb.Get(k) == nil {
				stray = append(stray, append([]byte(nil), k...))
			}
			return nil
		}); err != nil {
			return err
		}
		for _, k := range stray {
			if err := ab.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	return db, rows, bad, nil
}
