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

// The index is one bbolt file (format 2; convert.go has format 1 and
// its conversion). Every row of an entry is in one bucket, keyed by the
// entry's row number, which a new entry takes from a counter, and a tag:
//
//	rows: ROW 'a'          access time, allocated bytes, the entry's key (atimeLen)
//	      ROW 'c'          a digest of the boot and the data file's stamp when
//	                       it was last found good (checked.go); only if it was
//	      ROW 'e'          name, version, size, block size, chunk 0 (record.go)
//	      ROW 'k' BE32(i)  chunk i of the bitmap and CRCs, i >= 1
//	meta: the block size
//
// ROW is 8 bytes big endian, so that new entries go at the end of the
// B+tree: a cold epoch's commits append to its last leaves, where keys
// that were hashes put every row on a leaf of its own, at random, and
// each commit wrote a 4 KiB page per row. An entry's rows are next to
// each other, so a warm reads them in one descent and mostly one leaf;
// and a deletion takes them by prefix. Memory maps keys to rows
// (cold.go); the atime row maps them back, for Open.
//
// Every value ends with a seal (the CRC32C of its key and bytes, see
// record.go), so a damaged row is found: a damaged atime row loses its
// entry, a damaged header its entry, a damaged chunk only its blocks.
// Last access lives in a row of its own because cache hits update it:
// a use rewrites 52 bytes, not the entry's bitmap and CRCs; and only once
// it is an hour old (atimeGrain), or the file's size changed.
var (
	rowsBucket = []byte("rows")
	// metaBucket holds the block size the entries were cached with
	// (blockSizeKey, 8 bytes little endian).
	metaBucket   = []byte("meta")
	blockSizeKey = []byte("block_size")
)

// The tags of an entry's rows, after its row number.
const (
	tagAtime   = 'a'
	tagChecked = 'c'
	tagEntry   = 'e'
	tagChunk   = 'k'
)

// rowPrefixLen is the length of a row number in a key.
const rowPrefixLen = 8

// rowKey is the key of the row of an entry at row with tag.
func rowKey(row uint64, tag byte) []byte {
	k := make([]byte, rowPrefixLen+1, rowPrefixLen+5)
	binary.BigEndian.PutUint64(k, row)
	k[rowPrefixLen] = tag
	return k
}

// rowPrefix is the prefix of every key of the entry at row.
func rowPrefix(row uint64) []byte { return binary.BigEndian.AppendUint64(nil, row) }

// rowOf returns the row number and tag of key k, and false if k is
// shorter than both.
func rowOf(k []byte) (row uint64, tag byte, ok bool) {
	if len(k) < rowPrefixLen+1 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(k), k[rowPrefixLen], true
}

// coldRow is one entry as Open reads it: from its atime row alone.
type coldRow struct {
	key   coldKey
	row   uint64
	atime int64
	bytes int64 // allocated
}

// loadedIndex is what Open reads of the index: every entry's key, row,
// size and access time (or rank); keys of no row's form (bad) and the
// rows of no entry (badRows, with no good atime row); and the next row
// number for a new entry.
type loadedIndex struct {
	rows         []coldRow
	bad          [][]byte
	badRows      []uint64
	next         uint64
	fromSnapshot bool // rows came from the snapshot (snapshot.go)
	converted    int  // entries converted from format 1 (convert.go); -1: dropped, no room
}

// atimeLen is an atime row's length, without its seal: the access time
// and the data file's allocated bytes, so that Open learns an entry's
// size without reading its record or its file, then the entry's key.
const atimeLen = 8 + 8 + len(coldKey{})

// encodeAtime is the atime row (unsealed) of the entry key, last used at
// atime, with bytes allocated.
func encodeAtime(atime, bytes int64, key coldKey) []byte {
	v := make([]byte, atimeLen, atimeLen+4)
	binary.LittleEndian.PutUint64(v[:8], uint64(atime))
	binary.LittleEndian.PutUint64(v[8:], uint64(bytes))
	copy(v[16:], key[:])
	return v
}

// decodeAtime decodes the atime row v, sealed under k; false if it is
// damaged.
func decodeAtime(k, v []byte) (r coldRow, ok bool) {
	body, sealed := unseal(k, v)
	if !sealed || len(body) != atimeLen {
		return r, false
	}
	r.row, _, _ = rowOf(k)
	r.atime = int64(binary.LittleEndian.Uint64(body))
	r.bytes = int64(binary.LittleEndian.Uint64(body[8:]))
	copy(r.key[:], body[16:])
	return r, r.bytes >= 0 && r.bytes <= 1<<62
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
func openIndex(path string, bytes func(key string) int64, logf func(msg string, args ...any)) (db *bolt.DB, idx loadedIndex, err error) {
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
	// Once bbolt has opened and checked the index, the marker has done
	// its work: a start killed while converting the index (convert.go),
	// which can take seconds, must convert again, not lose the cache.
	checked := func() { os.Remove(marker) }
	for attempt := 0; attempt < 2; attempt++ {
		db, idx, err = tryOpenIndex(path, bytes, checked)
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

// openBolt opens the bbolt index at path, never through a symbolic link,
// waiting a second at most for another process's lock; noSync leaves
// commits unsynced (the caller syncs once at the end).
func openBolt(path string, noSync bool) (*bolt.DB, error) {
	return bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, OpenFile: openNoFollow, NoSync: noSync})
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
func tryOpenIndex(path string, bytes func(key string) int64, checked func()) (db *bolt.DB, idx loadedIndex, err error) {
	err = guard(func() error {
		db, idx, err = readIndex(path, bytes, checked)
		return err
	})
	if err != nil {
		return nil, loadedIndex{}, err
	}
	return db, idx, nil
}

// readIndex opens the index and reads every entry's row, access time and
// size, from the snapshot a clean Close left (snapshot.go) or else from
// the index's atime rows. An index of format 1 is converted first
// (convert.go), with bytes telling the allocated bytes of an entry's
// file where its rows did not (-1 if it is gone). It closes the
// database on the errors it returns (not on a panic: see tryOpenIndex).
// It calls checked, if not nil, once bbolt has opened and checked it.
func readIndex(path string, bytes func(key string) int64, checked func()) (db *bolt.DB, idx loadedIndex, err error) {
	db, err = openBolt(path, false)
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
	if err == nil && checked != nil {
		checked()
	}
	if err == nil {
		db, idx.converted, err = convertIndex(db, path, bytes)
		if db == nil {
			return nil, loadedIndex{}, err
		}
	}
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
			_, err := tx.CreateBucketIfNotExists(rowsBucket)
			return err
		})
	}
	if err == nil && !idx.fromSnapshot {
		prefetch(db)
		err = db.View(func(tx *bolt.Tx) error {
			idx.rows, idx.bad, idx.badRows = scanRows(tx.Bucket(rowsBucket))
			return nil
		})
	}
	if err == nil {
		err = db.View(func(tx *bolt.Tx) error {
			idx.next = nextRow(tx.Bucket(rowsBucket))
			return nil
		})
	}
	if err == nil {
		reserveIndex(path)
	}
	if err != nil {
		db.Close()
		return nil, loadedIndex{}, err
	}
	return db, idx, nil
}

// maxRow bounds row numbers: a key past it is damage (at a million new
// entries a second, 2^62 rows last 146,000 years).
const maxRow = 1 << 62

// nextRow is the row number for the next new entry: one past the
// index's last (1 in an empty index), so that no row is used twice.
func nextRow(b *bolt.Bucket) uint64 {
	c := b.Cursor()
	for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
		if row, _, ok := rowOf(k); ok && row < maxRow {
			return row + 1
		}
	}
	return 1
}

// prefetch asks the kernel to read the index file into the page cache,
// in large sequential reads, before the scan of access times faults its
// pages in one by one: bbolt maps the file MADV_RANDOM, and after a
// reboot the scan of a 1.28M-object index waited on about 40,000 random
// reads. Best effort.
func prefetch(db *bolt.DB) {
	f, err := os.Open(db.Path())
	if err != nil {
		return
	}
	defer f.Close()
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_WILLNEED)
}

// scanRows reads every entry's key, row, access time and size from their
// atime rows, in row order. The rows of entries without a good atime row
// are returned in badRows, and keys of no row's form in bad.
func scanRows(b *bolt.Bucket) (rows []coldRow, bad [][]byte, badRows []uint64) {
	var cur uint64
	started, found := false, false
	end := func() {
		if started && !found {
			badRows = append(badRows, cur)
		}
	}
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		row, tag, ok := rowOf(k)
		if !ok {
			bad = append(bad, bytes.Clone(k))
			continue
		}
		if !started || row != cur {
			end()
			cur, started, found = row, true, false
		}
		if tag != tagAtime || len(k) != rowPrefixLen+1 {
			continue
		}
		if r, ok := decodeAtime(k, v); ok {
			rows, found = append(rows, r), true
		}
	}
	end()
	return rows, bad, badRows
}

// entryRows is what readEntry read of an entry. lost counts the chunks
// found damaged: their blocks are absent, and the caller has them
// deleted. checked is the digest of the file's last check in this boot,
// if its checked row has one (checked.go), else zero. atime and bytes are
// its atime row's (0 and -1 if it has none).
type entryRows struct {
	rec     *record
	lost    int
	checked checkDigest
	atime   int64
	bytes   int64
}

// readEntry reads the rows of the entry at row from the index: its
// record, chunks, checked and atime rows, in one walk of its keys. A nil
// record with no error if there is none.
func (s *Store) readEntry(row uint64) (r entryRows, err error) {
	db := s.liveDB.Load() // not s.db: a commit may hold flushMu for a while
	if db == nil {
		return r, errIndexDamaged
	}
	r.bytes = -1
	err = guard(func() error {
		return db.View(func(tx *bolt.Tx) error {
			var checkedK, checked []byte
			var chunks [][2][]byte
			var p [rowPrefixLen]byte // no allocation per warm
			binary.BigEndian.PutUint64(p[:], row)
			prefix := p[:]
			c := tx.Bucket(rowsBucket).Cursor()
			for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
				switch _, tag, _ := rowOf(k); {
				case tag == tagEntry && len(k) == rowPrefixLen+1:
					rec, derr := decodeRecord(k, v)
					if r.rec = rec; derr != nil {
						return derr
					}
				case tag == tagAtime && len(k) == rowPrefixLen+1:
					if a, ok := decodeAtime(k, v); ok {
						r.atime, r.bytes = a.atime, a.bytes
					}
				case tag == tagChecked && len(k) == rowPrefixLen+1:
					checkedK, checked = k, v
				case tag == tagChunk:
					chunks = append(chunks, [2][]byte{k, v})
				}
			}
			rec := r.rec
			if rec == nil {
				return nil
			}
			if checked != nil {
				r.checked = decodeChecked(checkedK, checked, s.bootID, rec.size)
			}
			n := numBlocks(rec.size, rec.blockSize)
			if rec.format != recordV2 || numChunks(n) == 1 {
				r.lost = len(chunks)
				return nil
			}
			for _, ch := range chunks {
				ck, cv := ch[0], ch[1]
				body, sealed := unseal(ck, cv)
				i := int64(-1)
				if len(ck) == rowPrefixLen+5 {
					i = int64(binary.BigEndian.Uint32(ck[rowPrefixLen+1:]))
				}
				if i < 1 || i >= numChunks(n) || !sealed || !readChunk(body, rec.present, rec.crcs, n, i) {
					r.lost++
				}
			}
			return nil
		})
	})
	return r, err
}

// deleteEntryRows deletes every row of the entry at row from b: its
// record, chunks, access time and check.
func deleteEntryRows(b *bolt.Bucket, row uint64) error {
	return deletePrefix(b, rowPrefix(row))
}

// deleteChunks deletes every chunk row of the entry at row from b.
func deleteChunks(b *bolt.Bucket, row uint64) error {
	return deletePrefix(b, rowKey(row, tagChunk))
}

// deletePrefix deletes every key of b that begins with prefix.
func deletePrefix(b *bolt.Bucket, prefix []byte) error {
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// Room for the index on a full volume. A commit writes new pages, and
// when the file has no free page left bbolt extends it with a truncate,
// which allocates nothing: the pages' writes then need space of the
// volume that the data files may have taken, and a commit that fails for
// want of it loses its entries (their files become orphans, removed only
// after the next Open). So the index keeps the space of its next growth
// allocated past its end (fallocate with KEEP_SIZE): bbolt doubles a small
// file, and adds 16 MiB (its AllocSize) to a large one.
const (
	reserveMin = 64 << 10
	reserveMax = 32 << 20
)

// reserveIndex allocates the index at path, and the room for it to grow
// into, as far as the volume has it; best effort.
func reserveIndex(path string) {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	// Allocated past the end already: fallocate is only asked again once
	// the file grew into its reserve. From 0: bbolt's truncates leave
	// holes within the file too, for pages not yet written.
	if st.Blocks*512 >= st.Size+reserveMin {
		return
	}
	_ = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, st.Size+min(max(st.Size, reserveMin), reserveMax))
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
