package filecache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// The index is one bbolt file with three buckets keyed by the entry's hex
// key (record.go has the records' format):
//
//	entries: name, version, size, block size, chunk 0 of bitmap and CRCs
//	chunks:  the other chunks, keyed by entry key and chunk number
//	atime:   last access, unix nanoseconds, and allocated bytes (16 bytes)
//	checked: a digest of the boot and the data file's stamp when it was
//	         last found good (checked.go); only for files found good
//	meta:    the block size
//
// Last access lives apart because cache hits update it: keeping it out of
// the entry value means a use rewrites 16 bytes per object, not each
// object's bitmap and CRC array; and it is rewritten only once it is an
// hour old (atimeGrain), or the file's size changed.
var (
	entriesBucket = []byte("entries")
	atimeBucket   = []byte("atime")
	// metaBucket holds the block size the entries were cached with
	// (blockSizeKey, 8 bytes little endian).
	metaBucket   = []byte("meta")
	blockSizeKey = []byte("block_size")
)

// coldRow is one entry as Open reads it: from the atime bucket alone.
type coldRow struct {
	key   coldKey
	atime int64
	bytes int64 // allocated; -1 if the row predates them (8 bytes)
}

// loadedIndex is what Open reads of the index: every entry's key, size
// and access time (or rank), and keys that are no entry's (bad).
type loadedIndex struct {
	rows         []coldRow
	bad          []string
	fromSnapshot bool // rows came from the snapshot (snapshot.go)
}

// atimeLen is an atime row's length: the access time, then the data
// file's allocated bytes, so that Open learns an entry's size without
// reading its record or its file. (Rows of 8 bytes, the access time
// alone, were written before; Open counts their files once.)
const atimeLen = 16

// encodeAtime is the atime row of an entry last used at atime, with
// bytes allocated.
func encodeAtime(atime, bytes int64) (v [atimeLen]byte) {
	binary.LittleEndian.PutUint64(v[:8], uint64(atime))
	binary.LittleEndian.PutUint64(v[8:], uint64(bytes))
	return v
}

// fullCheckMax: an index up to this size is checked whole at Open (one
// walk of every page). A larger one is not walked: that would map all
// of it (564 MB at 1.28M objects) into ferry's memory and delay the
// mount by seconds; its pages are checked as they are read, under
// guard, and a commit that finds one damaged rebuilds the index.
const fullCheckMax = 64 << 20

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
func openIndex(path string, logf func(msg string, args ...any)) (db *bolt.DB, idx loadedIndex, err error) {
	// bbolt checks an index in a goroutine of its own, where a fault on a
	// damaged page kills the process (guard cannot reach it). A marker
	// left by an open that never finished says so at the next start,
	// which moves the index aside rather than die on it again. (The
	// caller holds the directory's lock: no other process is opening.)
	marker := path + ".opening"
	if _, err := os.Lstat(marker); err == nil {
		if err := moveAside(path, logf, "cache index: the last start died opening it; moving it aside and starting an empty cache",
			errors.New("open did not finish")); err != nil {
			return nil, loadedIndex{}, err
		}
	}
	mf, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, loadedIndex{}, fmt.Errorf("open cache index %s: %w", path, err)
	}
	mf.Close()
	defer os.Remove(marker)
	for attempt := 0; attempt < 2; attempt++ {
		db, idx, err = tryOpenIndex(path)
		if err == nil {
			return db, idx, nil
		}
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, loadedIndex{}, fmt.Errorf("cache index %s is locked by another process: %w", path, err)
		}
		if envError(err) && !errors.Is(err, errIndexDamaged) {
			return nil, loadedIndex{}, fmt.Errorf("open cache index %s: %w", path, err)
		}
		if attempt == 1 {
			break
		}
		if err := moveAside(path, logf, "cache index is corrupt; moving it aside and starting an empty cache", err); err != nil {
			return nil, loadedIndex{}, err
		}
	}
	return nil, loadedIndex{}, fmt.Errorf("open cache index %s: %w", path, err)
}

// moveAside moves the corrupt index at path to path+".corrupt" (one
// earlier copy is replaced), or removes it if it cannot be moved.
func moveAside(path string, logf func(msg string, args ...any), msg string, why error) error {
	aside := path + ".corrupt"
	logf(msg, "path", path, "moved_to", aside, "err", why)
	os.Remove(filepath.Join(filepath.Dir(path), snapshotName))
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
func tryOpenIndex(path string) (db *bolt.DB, idx loadedIndex, err error) {
	err = guard(func() error {
		db, idx, err = readIndex(path)
		return err
	})
	if err != nil {
		return nil, loadedIndex{}, err
	}
	return db, idx, nil
}

// readIndex opens the index and reads every entry's access time and
// size, from the snapshot a clean Close left (snapshot.go) or else from
// the index's atime rows. It closes the database on the errors it returns (not on a panic:
// see tryOpenIndex).
func readIndex(path string) (db *bolt.DB, idx loadedIndex, err error) {
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, OpenFile: openNoFollow})
	if err != nil {
		return nil, loadedIndex{}, err
	}
	// A full consistency check (page types, reachability, freelist) costs
	// one walk of the index and catches damage that would otherwise
	// surface as a panic in a later commit; a large index is checked as
	// it is read instead (fullCheckMax).
	err = db.View(func(tx *bolt.Tx) error {
		if tx.Size() > fullCheckMax {
			return nil
		}
		for cerr := range tx.Check() {
			if err == nil {
				err = cerr
			}
		}
		return err
	})
	// The snapshot, if a clean Close left one for this very index state
	// (read before the Update below commits).
	var txid int
	if err == nil {
		err = db.View(func(tx *bolt.Tx) error { txid = tx.ID(); return nil })
	}
	if err == nil {
		idx.rows, idx.fromSnapshot = readSnapshot(filepath.Dir(path), txid)
	}
	if err == nil {
		err = db.Update(func(tx *bolt.Tx) error {
			for _, b := range entryBuckets {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err == nil && !idx.fromSnapshot {
		prefetch(db)
		err = db.View(func(tx *bolt.Tx) error {
			idx.rows, idx.bad = scanAtimes(tx.Bucket(atimeBucket))
			return nil
		})
	}
	if err != nil {
		db.Close()
		return nil, loadedIndex{}, err
	}
	return db, idx, nil
}

// prefetch asks the kernel to read the index file into the page cache,
// in large sequential reads, before the scan of access times faults its
// pages in one by one: bbolt maps the file MADV_RANDOM, and the atime
// rows' pages are spread over the whole file, so after a reboot the
// scan of a 1.28M-object index waited on about 40,000 random reads.
// Best effort.
func prefetch(db *bolt.DB) {
	f, err := os.Open(db.Path())
	if err != nil {
		return
	}
	defer f.Close()
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_WILLNEED)
}

// scanAtimes reads every entry's access time and size, in key order;
// keys that are no entry's (not 64 hex digits) are returned in bad.
func scanAtimes(ab *bolt.Bucket) (rows []coldRow, bad []string) {
	c := ab.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		ck, ok := coldKeyOf(string(k))
		if !ok {
			bad = append(bad, string(k))
			continue
		}
		r := coldRow{key: ck, bytes: -1}
		if len(v) >= 8 {
			r.atime = int64(binary.LittleEndian.Uint64(v))
		}
		if len(v) == atimeLen {
			r.bytes = min(int64(binary.LittleEndian.Uint64(v[8:])), 1<<62)
		}
		rows = append(rows, r)
	}
	return rows, bad
}

// entryRows is what readEntry read of an entry. lost counts the chunks
// found damaged: their blocks are absent, and the caller has them
// deleted. checked is the digest of the file's last check in this boot,
// if its checked row has one (checked.go), else zero. atime and bytes are
// its atime row's (0 and -1 if it has none, or one without the size).
type entryRows struct {
	rec     *record
	lost    int
	checked checkDigest
	atime   int64
	bytes   int64
}

// readEntry reads the record of key, its chunks, checked and atime rows
// from the index; a nil record with no error if there is none.
func (s *Store) readEntry(key string) (r entryRows, err error) {
	db := s.liveDB.Load() // not s.db: a commit may hold flushMu for a while
	if db == nil {
		return r, errIndexDamaged
	}
	err = guard(func() error {
		return db.View(func(tx *bolt.Tx) error {
			k := []byte(key)
			v := tx.Bucket(entriesBucket).Get(k)
			if v == nil {
				return nil
			}
			rec, derr := decodeRecord(k, v)
			if r.rec = rec; derr != nil {
				return derr
			}
			if cv := tx.Bucket(checkedBucket).Get(k); cv != nil {
				r.checked = decodeChecked(k, cv, s.bootID, rec.size)
			}
			r.bytes = -1
			if av := tx.Bucket(atimeBucket).Get(k); len(av) >= 8 {
				r.atime = int64(binary.LittleEndian.Uint64(av))
				if len(av) == atimeLen {
					r.bytes = int64(binary.LittleEndian.Uint64(av[8:]))
				}
			}
			n := numBlocks(rec.size, rec.blockSize)
			if rec.format != recordV2 || numChunks(n) == 1 {
				return nil
			}
			c := tx.Bucket(chunksBucket).Cursor()
			for ck, cv := c.Seek(k); ck != nil && bytes.HasPrefix(ck, k); ck, cv = c.Next() {
				i := int64(binary.BigEndian.Uint32(ck[len(k):]))
				body, sealed := unseal(ck, cv)
				if len(ck) != len(k)+4 || i == 0 || i >= numChunks(n) || !sealed || !readChunk(body, rec.present, rec.crcs, n, i) {
					r.lost++
				}
			}
			return nil
		})
	})
	return r, err
}

// entryBuckets are the buckets that hold entries' rows, by entry key.
var entryBuckets = [][]byte{entriesBucket, chunksBucket, atimeBucket, checkedBucket}

// deleteEntryRows deletes every row of the entry key from tx: its record,
// chunks, access time and check.
func deleteEntryRows(tx *bolt.Tx, key []byte) error {
	for _, b := range [][]byte{entriesBucket, atimeBucket, checkedBucket} {
		if err := tx.Bucket(b).Delete(key); err != nil {
			return err
		}
	}
	return deleteChunks(tx.Bucket(chunksBucket), key)
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

// releaseInterval is how often releaser releases the index's pages,
// besides the releases within each commit (releasePuts) and every
// releaseEvery warms: it bounds what other reads of the index (Open's
// scan, eviction, inspection) leave mapped.
const releaseInterval = 50 * time.Millisecond

// releaser releases the index's pages every releaseInterval until Close,
// whatever the commits and the warms are doing: what ferry maps of the
// index then stays within what it touches in that time.
func (s *Store) releaser() {
	defer close(s.releasing)
	tick := s.hooks.releaseTick
	if tick == nil {
		t := time.NewTicker(releaseInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.done:
			return
		case <-tick:
		}
		releaseIndexPages(s.liveDB.Load())
		if s.hooks.released != nil {
			s.hooks.released()
		}
	}
}

// releaseMin: an index smaller than this stays resident; releasing it
// would save little.
const releaseMin = 32 << 20

// releaseIndexPages drops the index's pages from ferry's resident memory:
// madvise(MADV_DONTNEED) on bbolt's map of the file, which is read-only
// and shared, so the pages stay in the page cache and a later read maps
// again what it needs (a minor fault). Without it every record read as
// entries warm stays mapped: all 564 MB of a 1.28M-object index after one
// epoch, counted in ferry's RSS. It runs in a read transaction, which
// holds bbolt's map in place (a remap waits for it).
func releaseIndexPages(db *bolt.DB) {
	if db == nil {
		return
	}
	_ = guard(func() error {
		return db.View(func(tx *bolt.Tx) error {
			releaseTxPages(tx)
			return nil
		})
	})
}

// releaseTxPages is releaseIndexPages within tx, which holds the map in
// place: a write transaction remaps only in its commit.
func releaseTxPages(tx *bolt.Tx) {
	if size := tx.Size(); size >= releaseMin {
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, tx.DB().Info().Data, uintptr(size), unix.MADV_DONTNEED)
	}
}
