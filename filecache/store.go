package filecache

import (
	"container/list"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	bolt "go.etcd.io/bbolt"
)

// DefaultBlockSize is 64 KiB. A 512 KiB record at a random offset touches
// on average record/block + 1 blocks, so the bytes fetched per byte read
// are (512 + 64) / 512 = 1.125 (128 KiB would give 1.25, too close to the
// 1.3 the product allows once readahead adds its own slack). Per-block
// overhead stays small: one bit and a 4-byte CRC per 64 KiB is 0.006% of
// the cached bytes (64 MiB of CRCs per TiB), and one pread plus a CRC32C
// of 64 KiB costs a few microseconds, well under the pread itself.
const DefaultBlockSize = 64 << 10

const (
	minBlockSize = 4 << 10
	maxBlockSize = 16 << 20

	// defaultShare of (free space + cache) at open is the limit when
	// MaxSize is 0: most of the volume, leaving room for the rest of the
	// machine's writes (checkpoints, logs).
	defaultShare = 0.8

	flushInterval = time.Second
	// syncInterval spaces out syncfs of the data volume: forcing
	// writeback every second made a cold epoch wait on the disk (about
	// 10% of a 500 MB/s link on this machine), while the CRC of every
	// block, not the sync, is what keeps a lost write from being served.
	syncInterval = 30 * time.Second
	// flushBlocks dirty blocks trigger a commit before the interval is
	// up, bounding what a crash can lose.
	flushBlocks = 4096

	// defaultMaxOpen bounds cached open entries (two descriptors each once
	// written: buffered and O_DIRECT); datasets of millions of small
	// objects must not exhaust the process's descriptors.
	defaultMaxOpen = 512
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Config configures a Store.
type Config struct {
	// Dir holds the cache; created 0700 if missing. Nothing is written
	// outside it.
	Dir string
	// MaxSize bounds the disk space the cache uses, counted as allocated
	// bytes. 0 means 80% of (the volume's free space at open + what the
	// cache already uses).
	MaxSize int64
	// MinFree keeps at least this many bytes free on Dir's volume,
	// evicting if other writers fill it. 0 means no floor beyond MaxSize.
	MinFree int64
	// BlockSize is the unit of caching and checksumming: a power of two
	// from 4 KiB to 16 MiB; 0 means DefaultBlockSize. Entries cached with
	// another block size are dropped at open (their files in the
	// background).
	BlockSize int64
	// BucketID distinguishes buckets sharing one Dir (e.g. Bucket.Name()).
	BucketID string
	// Logger may be nil.
	Logger *slog.Logger
	// Registerer for the ferry_cache_* metrics; may be nil.
	Registerer prometheus.Registerer
	// Splice lets Spliceable hand out data files for blocks that passed
	// their CRC check since the store opened (splice.go). It costs an
	// fstat per read, and per write to a file with checked blocks.
	Splice bool
	// CheckWrites has a write that stores every block of an object of
	// at most writeCheckMax bytes through the page cache read the file
	// back and check it, as WholeFile.Check would (write.go): for
	// passthrough, whose first open of the file then needs no reads
	// through the store to check it.
	CheckWrites bool
}

// Stats are the store's counters since Open, and its current size.
type Stats struct {
	HitBlocks, HitBytes     int64 // blocks ReadBlocks filled or Spliceable handed out
	MissBlocks, MissBytes   int64 // blocks ReadBlocks did not fill (absent, evicted or corrupt)
	WriteBlocks, WriteBytes int64 // blocks stored
	Evictions               int64 // entries evicted (LRU, limit or floor)
	EvictedUnreadBytes      int64 // their bytes, of entries evicted with no read since their last write
	CorruptBlocks           int64 // blocks dropped on a CRC mismatch or short read
	WriteErrors             int64 // failed data writes (ENOSPC, EROFS, ...)
	WholeChecks             int64 // files WholeFile.Check, or their write (CheckWrites), read and checked whole
	WholeCheckedBytes       int64 // their bytes
	ReadChecks              int64 // files found whole and good by reads through the store (CheckAsRead)
	SplicedBlocks           int64 // blocks Spliceable handed out (of HitBlocks)
	SplicedBytes            int64 // their bytes
	Entries                 int64 // object versions with a data file
	ColdEntries             int64 // of Entries, those memory holds only the key and size of (cold.go)
	Warmed, Cooled          int64 // cold entries read from the index as they were used; warm ones put back
	UsedBytes               int64 // allocated bytes of all data files
	LimitBytes              int64 // effective MaxSize
}

// hooks let tests inject the volume's free space and failing writes.
type hooks struct {
	statfs  statfsFunc
	writeAt func(f *os.File, p []byte, off int64) (int, error)
	maxOpen int
	// syncData flushes written data before an index commit (syncfs).
	syncData func(dir *os.File) error
	// beforeRead runs after ReadBlocks pinned its entry, before the pread;
	// afterRead after the pread, before its blocks are checked.
	beforeRead, afterRead func()
	// duringCheck runs in WholeFile.Check after each buffer it read.
	duringCheck func()
	// readCheckEnding runs when a read check has counted every block,
	// before its final stamp.
	readCheckEnding func()
	// inCommit runs inside flush's index transaction (tests make it panic
	// as bbolt does on a damaged page).
	inCommit func()
	// indexPut sees every key and value a commit puts in the index.
	indexPut func(key, val []byte)
	// maxWarm bounds the entries held whole (cold.go).
	maxWarm int
	// releaseTick, if set, replaces releaser's ticker; released runs
	// after each of its releases (index.go).
	releaseTick <-chan time.Time
	released    func()
	// flushTick, if set, replaces flusher's ticker: a test that commits
	// by itself then sees the same commits however long it runs.
	flushTick <-chan time.Time
	// bootID, if set, replaces reading the machine's boot ID at Open
	// (checked.go).
	bootID func() string
	// now, if set, replaces the clock of uses (unix nanoseconds).
	now func() int64
}

// deletion tracks an evicted key until its file is unlinked AND the index
// deletion is committed. Until both, no new file is created for the key:
// otherwise a crash could leave the old record's bitmap describing a new,
// mostly empty file.
type deletion struct {
	unlinked, committed bool
}

// entry is one cached object version.
type entry struct {
	// Constant data
	key     string // keyFor(obj): hex SHA-256, also the file name
	row     uint64 // its rows' number in the index (index.go)
	obj     Key
	nblocks int64

	// Mutable state
	present bitmap   // GUARDED_BY(Store.mu)
	crcs    []uint32 // GUARDED_BY(Store.mu); 0 where absent
	bytes   int64    // GUARDED_BY(Store.mu); allocated on disk
	atime   int64    // GUARDED_BY(Store.mu); unix nanos
	// savedAtime and savedBytes are what the index's atime row holds
	// (0 if unknown): the commit writes the row again when the bytes
	// differ, or touchLocked found the access time atimeGrain old.
	savedAtime int64 // GUARDED_BY(Store.mu)
	savedBytes int64 // GUARDED_BY(Store.mu)
	// fillEnd: until the store's traffic clock reaches it, a use of the
	// entry is its own fill, not a reuse (insert.go).
	fillEnd  int64         // GUARDED_BY(Store.mu)
	reserved int64         // GUARDED_BY(Store.mu); its writes' share of Store.reserved
	elem     *list.Element // GUARDED_BY(Store.mu); in Store.lru while live
	openElem *list.Element // GUARDED_BY(Store.mu); in Store.open while file != nil
	file     *os.File      // GUARDED_BY(Store.mu)
	// direct is file reopened with O_DIRECT, for writes; nil until the
	// first write (or when the volume refuses direct I/O).
	direct *os.File // GUARDED_BY(Store.mu)
	pins   int32    // GUARDED_BY(Store.mu); reads and writes in flight, and holds
	// holds: WholeFiles handed out (whole.go), long-lived pins.
	holds   int32 // GUARDED_BY(Store.mu)
	writing int32 // GUARDED_BY(Store.mu); writes in flight
	// dirtyChunks are the chunks but 0 changed since the last commit;
	// resetChunks: the index may hold chunks that memory no longer has
	// (the file was created again), and the commit deletes them first.
	dirtyChunks map[int64]struct{} // GUARDED_BY(Store.mu)

	// The small fields together, so that an entry (one per cached object,
	// a million and more on a large cache) packs without padding.
	own       bool // constant: cached for this BucketID (not left by another bucket)
	live      bool // GUARDED_BY(Store.mu); false once evicted
	metaDirty bool // GUARDED_BY(Store.mu); the header and chunk 0 (record.go)
	// unread: written and not read since (a read of its blocks, or one
	// served from a copy elsewhere that the cache was told of, Consumed).
	unread      bool // GUARDED_BY(Store.mu)
	atimeDirty  bool // GUARDED_BY(Store.mu)
	resetChunks bool // GUARDED_BY(Store.mu)
	// wantReadCheck: WholeFile.CheckAsRead asked that reads through the
	// store count toward a check of the whole file; readCheck is that
	// count since its stamp (whole.go). Both are reset when a block goes.
	wantReadCheck bool // GUARDED_BY(Store.mu)
	// checkedDirty: verified changed since the last commit, which writes
	// or deletes its checked row (checked.go).
	checkedDirty bool // GUARDED_BY(Store.mu)

	readCheck *readCheck // GUARDED_BY(Store.mu)
	// verified is the data file's stamp when WholeFile.Check last read
	// it whole (or reads covered it, readCheck), in this process or, in
	// the same boot, an earlier one (checked.go): while the file shows
	// it, it has not been written since.
	verified fileStamp // GUARDED_BY(Store.mu)
	// checked: the blocks read from the data file and found good since
	// the store opened, while the file showed checkedStamp (splice.go);
	// nil if none.
	checked      bitmap    // GUARDED_BY(Store.mu)
	checkedStamp fileStamp // GUARDED_BY(Store.mu)

	// opening serialises opening (and creating) the data file, so that
	// the one who creates it is the one who installs it, before anyone
	// has written to it.
	opening sync.Mutex
}

// Store is the cache. All methods are safe for concurrent use.
//
// Lock order: flushMu, then mu. mu guards only memory and is never held
// across a syscall that touches the disk (pread, pwrite, open, unlink,
// fsync, index commits); a read or write pins its entry instead, and an
// evicted entry's file is closed and unlinked by whoever drops the last pin.
type Store struct {
	// Dependencies
	log     *slog.Logger
	reg     prometheus.Registerer
	hooks   hooks
	metrics []prometheus.Collector

	// Constant data
	dir       string // Dir/v1
	dataDir   string // Dir/v1/data
	root      string // Config.Dir
	blockSize int64
	bucketID  string
	limit     int64
	minFree   int64
	fsBlock   int64 // allocation unit, for estimating a write's space
	// fromSnapshot: Open read the entries from the snapshot a clean
	// Close left (snapshot.go), not from the index.
	fromSnapshot bool
	db           *bolt.DB // GUARDED_BY(flushMu) once open
	// liveDB is db for reads outside flushMu (warming, cold.go); a
	// rebuild replaces both.
	liveDB  atomic.Pointer[bolt.DB]
	dirFile *os.File // Dir/v1, for syncfs
	lock    *os.File // Dir/v1/lock, flock'ed while open

	flushMu   sync.Mutex    // serialises index commits
	lastSync  time.Time     // GUARDED_BY(flushMu)
	unsynced  bool          // GUARDED_BY(flushMu); blocks written since lastSync
	syncEvery time.Duration // GUARDED_BY(flushMu); syncInterval but in tests
	kick      chan struct{}
	done      chan struct{}
	stopped   chan struct{}
	tidied    chan struct{} // closed when tidy is done
	releasing chan struct{} // closed when releaser is done

	mu sync.Mutex
	// INVARIANT: used == sum of bytes over entries and cold entries.
	// INVARIANT: e in entries <=> e.live <=> e.elem != nil.
	// INVARIANT: byObj holds exactly the entries with own set.
	entries     map[string]*entry    // GUARDED_BY(mu); by key, incl. other buckets' entries
	byObj       map[Key]*entry       // GUARDED_BY(mu); this bucket's entries, by Key: no SHA-256 per lookup
	lru         *list.List           // GUARDED_BY(mu); front = most recent
	open        *list.List           // GUARDED_BY(mu); entries with an open file, front = most recent
	cold        coldSet              // GUARDED_BY(mu); entries the index has and memory does not (cold.go)
	deleting    map[string]*deletion // GUARDED_BY(mu); evicted, not yet unlinked and committed
	dirty       map[string]*entry    // GUARDED_BY(mu); to write at the next commit
	deleted     map[uint64]string    // GUARDED_BY(mu); rows to delete at the next commit, and their keys
	nextRow     uint64               // GUARDED_BY(mu); the row of the next new entry
	dirtyBlocks int                  // GUARDED_BY(mu)
	used        int64                // GUARDED_BY(mu)
	reserved    int64                // GUARDED_BY(mu); space claimed by writes in flight
	// reservedEvicted: of reserved, that of writes to entries evicted
	// since they began: what they write goes with the file, so it makes
	// no room to evict more for it (evict.go).
	reservedEvicted int64 // GUARDED_BY(mu)
	pendingFree     int64 // GUARDED_BY(mu); evicted bytes not yet unlinked
	// heldEvicted: of pendingFree, the bytes of entries a WholeFile holds
	// (whole.go); they stay on disk until released, so they still count.
	heldEvicted int64           // GUARDED_BY(mu)
	loggedKinds map[string]bool // GUARDED_BY(mu)
	closed      bool            // GUARDED_BY(mu)
	ins         inserter        // GUARDED_BY(mu); where new entries enter the LRU list (insert.go)

	// noDirect: the volume refused O_DIRECT (tmpfs before Linux 6.6,
	// some FUSE and network file systems); write through the page cache.
	noDirect atomic.Bool

	hitBlocks, hitBytes, missBlocks, missBytes atomic.Int64
	writeBlocks, writeBytes                    atomic.Int64
	evictions, corrupt, writeErrors            atomic.Int64
	evictedUnreadBytes                         atomic.Int64
	wholeChecks, wholeCheckedBytes             atomic.Int64
	readChecks                                 atomic.Int64
	splicedBlocks, splicedBytes                atomic.Int64
	warmed, cooled                             atomic.Int64

	splice      bool // Config.Splice
	checkWrites bool // Config.CheckWrites
	// bootID is the machine's boot ID, read at Open; "" if unknown, and
	// then no check is kept across processes (checked.go).
	bootID string
}

// ErrInvalid is wrapped by every error about the cache's configuration:
// Config's sizes and a cache directory ferry must not use (see
// checkPrivate). Open's other errors are about the machine (a full or
// read-only volume, a locked index) or the index, and do not wrap it.
var ErrInvalid = errors.New("invalid argument")

func validateBlockSize(bs int64) error {
	if bs < minBlockSize || bs > maxBlockSize || bs&(bs-1) != 0 {
		return fmt.Errorf("cache block size %d must be a power of two from %d to %d: %w", bs, minBlockSize, maxBlockSize, ErrInvalid)
	}
	return nil
}

func numBlocks(size uint64, bs int64) int64 {
	return int64((size + uint64(bs) - 1) / uint64(bs))
}

// BlockSize is the size of every block but an object's last.
func (s *Store) BlockSize() int64 { return s.blockSize }

// Stats returns the counters and current usage.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	used, warm, cold := s.used, int64(len(s.entries)), int64(s.cold.len())
	s.mu.Unlock()
	return Stats{
		HitBlocks: s.hitBlocks.Load(), HitBytes: s.hitBytes.Load(),
		MissBlocks: s.missBlocks.Load(), MissBytes: s.missBytes.Load(),
		WriteBlocks: s.writeBlocks.Load(), WriteBytes: s.writeBytes.Load(),
		Evictions: s.evictions.Load(), EvictedUnreadBytes: s.evictedUnreadBytes.Load(),
		CorruptBlocks: s.corrupt.Load(),
		WriteErrors:   s.writeErrors.Load(),
		WholeChecks:   s.wholeChecks.Load(), WholeCheckedBytes: s.wholeCheckedBytes.Load(),
		ReadChecks:    s.readChecks.Load(),
		SplicedBlocks: s.splicedBlocks.Load(), SplicedBytes: s.splicedBytes.Load(),
		Entries: warm + cold, ColdEntries: cold, Warmed: s.warmed.Load(), Cooled: s.cooled.Load(),
		UsedBytes: used, LimitBytes: s.limit,
	}
}

// Close commits the index and releases files. Reads and writes after
// Close miss.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.done)
	<-s.stopped
	<-s.tidied
	<-s.releasing
	err := s.flush()
	if err == nil {
		// For the next Open to read instead of the index (snapshot.go).
		s.flushMu.Lock()
		if serr := s.writeSnapshot(); serr != nil {
			s.log.Warn("cache: could not write the entries' snapshot; the next start reads the index", "err", serr)
		}
		s.flushMu.Unlock()
	}
	s.mu.Lock()
	var files []openFiles
	for el := s.open.Front(); el != nil; {
		e := el.Value.(*entry)
		el = el.Next()
		if e.pins == 0 {
			files = append(files, s.detachFileLocked(e))
		}
	}
	s.mu.Unlock()
	for _, f := range files {
		f.close()
	}
	for _, c := range s.metrics {
		s.reg.Unregister(c)
	}
	s.dirFile.Close()
	s.flushMu.Lock() // a Drop may be flushing (and rebuilding s.db)
	if s.db != nil {
		if cerr := s.db.Close(); err == nil {
			err = cerr
		}
	}
	s.flushMu.Unlock()
	s.lock.Close() // and with it the flock
	return err
}
