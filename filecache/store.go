package filecache

import (
	"container/list"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
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
	// another block size are dropped at open.
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
}

// Stats are the store's counters since Open, and its current size.
type Stats struct {
	HitBlocks, HitBytes     int64 // blocks ReadBlocks filled or Spliceable handed out
	MissBlocks, MissBytes   int64 // blocks ReadBlocks did not fill (absent, evicted or corrupt)
	WriteBlocks, WriteBytes int64 // blocks stored
	Evictions               int64 // entries evicted (LRU, limit or floor)
	CorruptBlocks           int64 // blocks dropped on a CRC mismatch or short read
	WriteErrors             int64 // failed data writes (ENOSPC, EROFS, ...)
	WholeChecks             int64 // files WholeFile.Check read and checked whole
	WholeCheckedBytes       int64 // their bytes
	ReadChecks              int64 // files found whole and good by reads through the store (CheckAsRead)
	SplicedBlocks           int64 // blocks Spliceable handed out (of HitBlocks)
	SplicedBytes            int64 // their bytes
	Entries                 int64 // object versions with a data file
	UsedBytes               int64 // allocated bytes of all data files
	LimitBytes              int64 // effective MaxSize
}

// statfsFunc reports the bytes available to us and the volume size.
type statfsFunc func(path string) (avail, total int64, err error)

func realStatfs(path string) (int64, int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), nil
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
	own     bool   // cached for this BucketID (not left by another bucket)
	obj     Key
	nblocks int64
	path    string

	// Mutable state
	present  bitmap        // GUARDED_BY(Store.mu)
	crcs     []uint32      // GUARDED_BY(Store.mu); 0 where absent
	bytes    int64         // GUARDED_BY(Store.mu); allocated on disk
	atime    int64         // GUARDED_BY(Store.mu); unix nanos
	elem     *list.Element // GUARDED_BY(Store.mu); in Store.lru while live
	openElem *list.Element // GUARDED_BY(Store.mu); in Store.open while file != nil
	file     *os.File      // GUARDED_BY(Store.mu)
	// direct is file reopened with O_DIRECT, for writes; nil until the
	// first write (or when the volume refuses direct I/O).
	direct *os.File // GUARDED_BY(Store.mu)
	pins   int      // GUARDED_BY(Store.mu); reads and writes in flight, and holds
	// holds: WholeFiles handed out (whole.go), long-lived pins.
	holds      int  // GUARDED_BY(Store.mu)
	writing    int  // GUARDED_BY(Store.mu); writes in flight
	live       bool // GUARDED_BY(Store.mu); false once evicted
	metaDirty  bool // GUARDED_BY(Store.mu)
	atimeDirty bool // GUARDED_BY(Store.mu)
	// verified is the data file's stamp when WholeFile.Check last read
	// it whole (or reads covered it, readCheck): while the file shows
	// it, it has not been written since.
	verified fileStamp // GUARDED_BY(Store.mu)
	// wantReadCheck: WholeFile.CheckAsRead asked that reads through the
	// store count toward a check of the whole file; readCheck is that
	// count since its stamp (whole.go). Both are reset when a block goes.
	wantReadCheck bool       // GUARDED_BY(Store.mu)
	readCheck     *readCheck // GUARDED_BY(Store.mu)
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
	db        *bolt.DB
	dirFile   *os.File // Dir/v1, for syncfs
	lock      *os.File // Dir/v1/lock, flock'ed while open

	flushMu   sync.Mutex    // serialises index commits
	lastSync  time.Time     // GUARDED_BY(flushMu)
	unsynced  bool          // GUARDED_BY(flushMu); blocks written since lastSync
	syncEvery time.Duration // GUARDED_BY(flushMu); syncInterval but in tests
	kick      chan struct{}
	done      chan struct{}
	stopped   chan struct{}

	mu sync.Mutex
	// INVARIANT: used == sum of bytes over entries.
	// INVARIANT: e in entries <=> e.live <=> e.elem != nil.
	// INVARIANT: byObj holds exactly the entries with own set.
	entries     map[string]*entry    // GUARDED_BY(mu); by key, incl. other buckets' entries
	byObj       map[Key]*entry       // GUARDED_BY(mu); this bucket's entries, by Key: no SHA-256 per lookup
	lru         *list.List           // GUARDED_BY(mu); front = most recent
	open        *list.List           // GUARDED_BY(mu); entries with an open file, front = most recent
	deleting    map[string]*deletion // GUARDED_BY(mu); evicted, not yet unlinked and committed
	dirty       map[string]*entry    // GUARDED_BY(mu); to write at the next commit
	deleted     map[string]struct{}  // GUARDED_BY(mu); to delete at the next commit
	dirtyBlocks int                  // GUARDED_BY(mu)
	used        int64                // GUARDED_BY(mu)
	reserved    int64                // GUARDED_BY(mu); space claimed by writes in flight
	pendingFree int64                // GUARDED_BY(mu); evicted bytes not yet unlinked
	// heldEvicted: of pendingFree, the bytes of entries a WholeFile holds
	// (whole.go); they stay on disk until released, so they still count.
	heldEvicted int64           // GUARDED_BY(mu)
	loggedKinds map[string]bool // GUARDED_BY(mu)
	closed      bool            // GUARDED_BY(mu)

	// noDirect: the volume refused O_DIRECT (tmpfs before Linux 6.6,
	// some FUSE and network file systems); write through the page cache.
	noDirect atomic.Bool

	hitBlocks, hitBytes, missBlocks, missBytes atomic.Int64
	writeBlocks, writeBytes                    atomic.Int64
	evictions, corrupt, writeErrors            atomic.Int64
	wholeChecks, wholeCheckedBytes             atomic.Int64
	readChecks                                 atomic.Int64
	splicedBlocks, splicedBytes                atomic.Int64

	splice bool // Config.Splice
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

// Open opens or creates the cache in cfg.Dir. A corrupt index is moved
// aside (and logged), not an error; another process holding the index is.
func Open(cfg Config) (*Store, error) {
	return open(cfg, hooks{})
}

func open(cfg Config, h hooks) (*Store, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("cache dir is empty: %w", ErrInvalid)
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = DefaultBlockSize
	}
	if err := validateBlockSize(cfg.BlockSize); err != nil {
		return nil, err
	}
	if cfg.MaxSize < 0 || cfg.MinFree < 0 {
		return nil, fmt.Errorf("cache max size and min free must not be negative: %w", ErrInvalid)
	}
	// Limits that leave no room would empty the cache at open (it evicts
	// down to them) and then store nothing, with no word why.
	if cfg.MaxSize > 0 && cfg.MaxSize < cfg.BlockSize {
		return nil, fmt.Errorf("the cache size (--cache-size) %s is smaller than one cache block (--cache-block-size %s): %w",
			humanize.IBytes(uint64(cfg.MaxSize)), humanize.IBytes(uint64(cfg.BlockSize)), ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if h.statfs == nil {
		h.statfs = realStatfs
	}
	if h.writeAt == nil {
		h.writeAt = (*os.File).WriteAt
	}
	if h.syncData == nil {
		h.syncData = func(d *os.File) error { return unix.Syncfs(int(d.Fd())) }
	}
	if h.maxOpen <= 0 {
		h.maxOpen = defaultMaxOpen
	}
	root, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	s := &Store{
		log:         cfg.Logger.With("component", "filecache"),
		reg:         cfg.Registerer,
		hooks:       h,
		root:        root,
		dir:         filepath.Join(root, "v1"),
		dataDir:     filepath.Join(root, "v1", "data"),
		blockSize:   cfg.BlockSize,
		bucketID:    cfg.BucketID,
		minFree:     cfg.MinFree,
		fsBlock:     4096,
		syncEvery:   syncInterval,
		kick:        make(chan struct{}, 1),
		done:        make(chan struct{}),
		stopped:     make(chan struct{}),
		entries:     map[string]*entry{},
		byObj:       map[Key]*entry{},
		lru:         list.New(),
		open:        list.New(),
		deleting:    map[string]*deletion{},
		dirty:       map[string]*entry{},
		deleted:     map[string]struct{}{},
		loggedKinds: map[string]bool{},
		splice:      cfg.Splice,
	}
	// Nothing is created below v1 before v1 is known to be ours.
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("create cache dir: %w", err)
	}
	// (A file system that reports no size, ramfs or an unlimited tmpfs,
	// is unknown, not full.)
	if _, total, err := h.statfs(root); err == nil && total > 0 && cfg.MinFree >= total {
		return nil, fmt.Errorf("the free space to leave (--cache-min-free) %s is not below the size of the cache's file system (%s): "+
			"the cache could hold nothing (a percentage, as --cache-min-free 10%%, scales with the volume): %w",
			humanize.IBytes(uint64(cfg.MinFree)), humanize.IBytes(uint64(total)), ErrInvalid)
	}
	if err := os.Mkdir(s.dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("create cache dir: %w", err)
	}
	if err := checkPrivate(root, s.dir, s.log); err != nil {
		return nil, err
	}
	if err := os.Chmod(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	if err := os.MkdirAll(s.dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create cache dir: %w", err)
	}
	if s.lock, err = lockDir(s.dir); err != nil {
		return nil, err
	}
	opened := false
	defer func() {
		if !opened {
			s.lock.Close()
		}
	}()
	var st unix.Statfs_t
	if unix.Statfs(s.dir, &st) == nil && st.Bsize > 0 {
		s.fsBlock = int64(st.Bsize)
	}
	db, rows, bad, err := openIndex(filepath.Join(s.dir, "index.db"), s.log.Error)
	if err != nil {
		return nil, err
	}
	s.db = db
	if err := s.load(rows, bad); err != nil {
		if !errors.Is(err, errIndexDamaged) {
			db.Close()
			return nil, err
		}
		// The damaged handle is dropped, not closed (see rebuildIndex).
		// Damage that only a commit showed: start again with an empty
		// index; every data file is then an orphan and goes.
		if s.db, err = s.freshIndex("cache index is corrupt; moving it aside and starting an empty cache", err); err != nil {
			return nil, err
		}
		s.entries, s.byObj, s.lru, s.used = map[string]*entry{}, map[Key]*entry{}, list.New(), 0
		if err := s.load(nil, nil); err != nil {
			s.db.Close()
			return nil, err
		}
	}
	avail, _, err := h.statfs(s.dir)
	if err != nil {
		s.db.Close()
		return nil, fmt.Errorf("statfs cache dir: %w", err)
	}
	s.limit = cfg.MaxSize
	if s.limit == 0 {
		s.limit = int64(defaultShare * float64(avail+s.used))
	}
	if s.dirFile, err = os.Open(s.dir); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("open cache dir: %w", err)
	}
	// Shrink to the limit now: it may have been lowered since last run.
	s.mu.Lock()
	victims, _ := s.makeRoomLocked(0, nil, avail)
	s.mu.Unlock()
	s.finishEvictions(victims)
	if err := s.registerMetrics(); err != nil {
		s.dirFile.Close()
		s.db.Close()
		return nil, err
	}
	go s.flusher()
	opened = true
	s.log.Info("cache opened", "dir", s.dir, "entries", len(s.entries), "used_bytes", s.used,
		"limit_bytes", s.limit, "min_free_bytes", s.minFree, "block_size", s.blockSize)
	return s, nil
}

// load reconciles the index with the data files: entries whose file is
// missing (or whose block size changed) go, files without an entry go,
// and usage is recounted from what the files really occupy.
func (s *Store) load(rows []loadedEntry, bad []string) error {
	var drop []string
	drop = append(drop, bad...)
	sort.Slice(rows, func(i, j int) bool { return rows[i].atime < rows[j].atime })
	for _, r := range rows {
		e := &entry{
			key: r.key, obj: Key{Name: r.rec.name, Version: r.rec.version, Size: r.rec.size},
			nblocks: numBlocks(r.rec.size, r.rec.blockSize), path: s.pathFor(r.key),
			present: r.rec.present, crcs: r.rec.crcs, atime: r.atime, live: true,
		}
		if r.rec.blockSize != s.blockSize {
			drop = append(drop, r.key)
			os.Remove(e.path)
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(e.path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			drop = append(drop, r.key)
			continue
		}
		e.bytes = st.Blocks * 512
		e.elem = s.lru.PushFront(e)
		s.entries[e.key] = e
		// Entries another BucketID left in a shared Dir stay until LRU
		// evicts them; only ours can be looked up.
		if s.keyFor(e.obj) == e.key {
			e.own = true
			s.byObj[e.obj] = e
		}
		s.used += e.bytes
	}
	// Orphans: anything under data/ that is not an indexed file. WalkDir
	// does not follow symlinks, and Remove on a link removes the link.
	var orphans int
	_ = filepath.WalkDir(s.dataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == s.dataDir {
			return nil
		}
		if d.IsDir() {
			if len(d.Name()) != 2 || filepath.Dir(p) != s.dataDir {
				orphans++
				os.RemoveAll(p)
				return filepath.SkipDir
			}
			return nil
		}
		if e, ok := s.entries[d.Name()]; !ok || e.path != p {
			orphans++
			os.Remove(p)
		}
		return nil
	})
	if orphans > 0 || len(drop) > 0 {
		s.log.Info("cache cleaned up", "orphan_files", orphans, "stale_entries", len(drop))
	}
	if len(drop) == 0 {
		return nil
	}
	if err := guard(func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			for _, k := range drop {
				if err := tx.Bucket(entriesBucket).Delete([]byte(k)); err != nil {
					return err
				}
				if err := tx.Bucket(atimeBucket).Delete([]byte(k)); err != nil {
					return err
				}
			}
			return nil
		})
	}); err != nil {
		return fmt.Errorf("clean cache index: %w", err)
	}
	return nil
}

// freshIndex moves the damaged index aside (logging msg) and opens an
// empty one in its place.
func (s *Store) freshIndex(msg string, why error) (*bolt.DB, error) {
	path := filepath.Join(s.dir, "index.db")
	if err := moveAside(path, s.log.Error, msg, why); err != nil {
		return nil, err
	}
	db, _, _, err := tryOpenIndex(path)
	if err != nil {
		return nil, fmt.Errorf("open cache index %s: %w", path, err)
	}
	return db, nil
}

// rebuildIndex replaces an index that a commit found damaged with a fresh
// one and marks every entry for the next commit: the index only mirrors
// what memory holds, so nothing cached is lost. If that fails, s.db is
// left nil and the next flush tries again. LOCKS_REQUIRED(flushMu)
func (s *Store) rebuildIndex(why error) error {
	// The damaged handle is dropped, not closed: a panic inside a write
	// transaction can leave bbolt's writer lock held (it reads the meta
	// page after taking it, with no deferred unlock), and Close would
	// then wait for it forever. Its descriptor and map are leaked, once;
	// its flock is on the file moved aside (our own lock is v1/lock).
	s.db = nil
	db, err := s.freshIndex("cache index damaged; moving it aside and writing it again from memory", why)
	if err != nil {
		return err
	}
	s.db = db
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.entries {
		if e.live {
			e.metaDirty, e.atimeDirty = true, true
			s.dirty[k] = e
		}
	}
	// The new index holds none of the evicted keys: their deletions are
	// committed.
	for k, d := range s.deleting {
		d.committed = true
		if d.unlinked {
			delete(s.deleting, k)
		}
	}
	clear(s.deleted)
	return nil
}

// BlockSize is the size of every block but an object's last.
func (s *Store) BlockSize() int64 { return s.blockSize }

// WillRead tells the kernel that blocks [first, first+n) of obj are about
// to be read (posix_fadvise WILLNEED), so that the disk reads behind one
// application read of many blocks run together instead of one block
// after another. Best effort: a missing entry or a failed advice is
// ignored; it reads nothing and changes no state.
func (s *Store) WillRead(obj Key, first, n int64) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	e := s.lookupLocked(obj)
	if s.closed || e == nil {
		s.mu.Unlock()
		return
	}
	e.pins++
	s.mu.Unlock()
	if f, err := s.fileFor(e, false); err == nil {
		_ = unix.Fadvise(int(f.Fd()), first*s.blockSize, n*s.blockSize, unix.FADV_WILLNEED)
	}
	s.unpin(e)
}

// unpin drops a pin of e taken by a read that is done with its file,
// and finishes e's eviction if that was the last pin of an evicted
// entry.
func (s *Store) unpin(e *entry) {
	s.mu.Lock()
	var finish *entry
	if s.unpinLocked(e) {
		finish = e
	}
	s.mu.Unlock()
	s.finishEvictions([]*entry{finish})
}

// HasBlock reports whether block idx of obj is cached (it may still fail
// its CRC check when read).
func (s *Store) HasBlock(obj Key, idx int64) bool {
	if s.blockLen(obj, idx) < 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookupLocked(obj)
	return e != nil && e.present.get(idx)
}

// ReadBlocks fills p with the consecutive blocks first, first+1, ... of
// obj that it holds (whole blocks; the object's last may be short), in
// one disk read; ok[i] reports block first+i (len(ok) is the block count)
// and the count of blocks filled is returned. A block is not filled if it
// is absent, was evicted, or fails its CRC (then it is dropped and
// counted); its bytes in p are then undefined. It never fills a block with
// bytes other than those stored for this object version.
func (s *Store) ReadBlocks(obj Key, first int64, p []byte, ok []bool) int {
	clear(ok)
	if len(ok) == 0 {
		return 0
	}
	var span int64
	for i := range ok {
		bl := s.blockLen(obj, first+int64(i))
		if bl < 0 || i < len(ok)-1 && bl != s.blockSize {
			return 0
		}
		span += bl
	}
	if span != int64(len(p)) {
		return 0
	}
	want := make([]uint32, len(ok))
	wanted := make([]bool, len(ok))
	s.mu.Lock()
	e := s.lookupLocked(obj)
	npresent := 0
	if !s.closed && e != nil {
		for i := range ok {
			if e.present.get(first + int64(i)) {
				wanted[i], want[i] = true, e.crcs[first+int64(i)]
				npresent++
			}
		}
	}
	if npresent == 0 {
		s.mu.Unlock()
		s.countMissBlocks(len(ok), int64(len(p)))
		return 0
	}
	e.pins++
	s.touchLocked(e)
	// A read check running (or asked for) counts this read; taken before
	// the read, as its stamp was.
	wantCheck, rc := e.wantReadCheck, e.readCheck
	s.mu.Unlock()

	if s.hooks.beforeRead != nil {
		s.hooks.beforeRead()
	}
	// Read from the first present block to the last.
	lo, hi := slices.Index(wanted, true), len(wanted)-1
	for !wanted[hi] {
		hi--
	}
	corrupt := make([]bool, len(ok))
	var stamp fileStamp
	stampErr := error(errNoStamp)
	f, err := s.fileFor(e, false)
	if err == nil {
		if wantCheck && rc == nil {
			rc = s.startReadCheck(e, f)
		}
		if s.splice {
			// Before the read, as for the read check: a change after
			// it moves the stamp, and the blocks are checked again.
			stamp, stampErr = stampOf(f)
		}
		from, to := int64(lo)*s.blockSize, min(int64(hi+1)*s.blockSize, int64(len(p)))
		n, rerr := f.ReadAt(p[from:to], first*s.blockSize+from)
		if s.hooks.afterRead != nil {
			s.hooks.afterRead()
		}
		for i := lo; i <= hi; i++ {
			if !wanted[i] {
				continue
			}
			bs, be := int64(i)*s.blockSize-from, min(int64(i+1)*s.blockSize, int64(len(p)))-from
			switch {
			case be <= int64(n) && crc32.Checksum(p[from+bs:from+be], castagnoli) == want[i]:
				ok[i] = true
			case be <= int64(n) || rerr != nil:
				// Wrong bytes or bytes gone: a torn write, a power cut, a
				// bad sector or a file truncated behind our back. Every
				// block from where the read stopped is dropped, not just
				// the first: a block left marked present is never
				// rewritten (writes skip present blocks), so the
				// cache would not heal; a healthy block after a bad
				// sector costs one refetch instead.
				corrupt[i] = true
			}
		}
		if rc != nil && !slices.Contains(corrupt, true) {
			s.countReadCheck(e, f, rc, first, ok)
		}
	}

	s.mu.Lock()
	var finish *entry
	dropped := 0
	for i := range ok {
		if corrupt[i] && s.dropLocked(e, first+int64(i), want[i]) {
			dropped++
		}
	}
	if stampErr == nil {
		s.markCheckedLocked(e, stamp, first, ok, want)
	}
	// The data file is gone (cache dir deleted?) or cannot be opened
	// (its mode changed, an I/O error): forget the entry, so that its
	// blocks are fetched and written again rather than missed forever.
	lost := err != nil && !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) && !errors.Is(err, syscall.ENOMEM)
	if lost && e.live {
		finish = s.evictLocked(e)
	}
	if s.unpinLocked(e) {
		finish = e
	}
	s.mu.Unlock()
	s.finishEvictions([]*entry{finish})
	if dropped > 0 {
		s.countCorrupt(e, dropped, first+int64(slices.Index(corrupt, true)))
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.logOnce("read: missing", "cache file vanished (cache directory deleted?); its blocks are fetched again", "object", e.obj.Name)
	case lost:
		s.logOnce("read: unreadable", "cache file cannot be opened; its blocks are fetched again", "object", e.obj.Name, "err", err)
	}
	filled, hit := 0, int64(0)
	for i, good := range ok {
		if good {
			filled++
			hit += min(int64(i+1)*s.blockSize, int64(len(p))) - int64(i)*s.blockSize
		}
	}
	s.hitBlocks.Add(int64(filled))
	s.hitBytes.Add(hit)
	if missed := len(ok) - filled; missed > 0 {
		s.countMissBlocks(missed, int64(len(p))-hit)
	}
	return filled
}

// dropLocked forgets block idx of e, read as failing its CRC, if it is
// still the block that was read (crc want): it is fetched and written
// again. LOCKS_REQUIRED(s.mu)
func (s *Store) dropLocked(e *entry, idx int64, want uint32) bool {
	if !e.live || !e.present.get(idx) || e.crcs[idx] != want {
		return false
	}
	e.present.clear(idx)
	e.crcs[idx] = 0
	e.wantReadCheck, e.readCheck = false, nil
	if e.checked != nil {
		e.checked.clear(idx)
	}
	s.markDirtyLocked(e, true)
	return true
}

// countCorrupt counts n blocks of e dropped by dropLocked, the first at
// idx.
func (s *Store) countCorrupt(e *entry, n int, idx int64) {
	s.corrupt.Add(int64(n))
	// Once: a failing disk would otherwise log every block it holds.
	s.logOnce("read: corrupt", "cache block failed its checksum; dropped and fetched again (logged once; see ferry_cache_corrupt_blocks_total)",
		"object", e.obj.Name, "block", idx)
}

func (s *Store) countMissBlocks(blocks int, bytes int64) {
	s.missBlocks.Add(int64(blocks))
	s.missBytes.Add(bytes)
}

// WriteBlocksCRC stores consecutive blocks of obj starting at block
// first. p holds whole blocks (the last may be the object's short final
// block); a trailing partial block is ignored. crcs[i] is the CRC32C
// (Castagnoli) of block first+i if the caller computed it while the bytes
// were hot in the CPU cache (a download computes them as blocks arrive;
// over a whole part afterwards it costs a second pass through memory);
// crcs may be nil or short, and missing ones are computed here. It returns
// how many blocks, from first on, are now stored: fewer when the cache
// cannot make room or the disk fails. Never an error: the cache is best
// effort.
func (s *Store) WriteBlocksCRC(obj Key, first int64, p []byte, crcs []uint32) int {
	if s.blockLen(obj, first) < 0 {
		return 0
	}
	// Split p into whole blocks.
	var lens []int64
	for off, idx := int64(0), first; ; idx++ {
		bl := s.blockLen(obj, idx)
		if bl < 0 || off+bl > int64(len(p)) {
			break
		}
		lens = append(lens, bl)
		off += bl
	}
	if len(lens) == 0 {
		return 0
	}
	avail, volSize, err := s.hooks.statfs(s.dir)
	if err != nil || volSize == 0 {
		avail = 1 << 62 // unknown (or a file system without a size): only MaxSize applies
	}
	key := s.keyFor(obj)

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0
	}
	if _, ok := s.deleting[key]; ok {
		// The previous file for this key is still being deleted (see
		// deletion); skip. A later read will fetch and write again.
		s.mu.Unlock()
		return 0
	}
	e := s.lookupLocked(obj)
	isNew := e == nil
	if e == nil {
		if old := s.entries[key]; old != nil {
			// A hash collision would need SHA-256 broken; still, never
			// mix two objects in one file.
			s.mu.Unlock()
			return 0
		}
		e = &entry{
			key: key, own: true, obj: obj,
			nblocks: numBlocks(obj.Size, s.blockSize), path: s.pathFor(key), live: true,
		}
		e.present = newBitmap(e.nblocks)
		e.crcs = make([]uint32, e.nblocks)
		e.elem = s.lru.PushFront(e)
		s.entries[key] = e
		s.byObj[obj] = e
		s.markDirtyLocked(e, true)
	}
	s.touchLocked(e)
	if e.present.allSet(first, first+int64(len(lens))) {
		s.mu.Unlock()
		return len(lens)
	}
	// Space the write may add: absent blocks, rounded to the allocation
	// unit. Fit as long a prefix as we can make room for.
	needs := make([]int64, len(lens)+1)
	for i, bl := range lens {
		needs[i+1] = needs[i]
		if !e.present.get(first + int64(i)) {
			needs[i+1] += (bl + s.fsBlock - 1) / s.fsBlock * s.fsBlock
		}
	}
	victims, fit := s.makeRoomLocked(needs[len(lens)], e, avail)
	k := len(lens)
	for k > 0 && !fit(needs[k]) {
		k--
	}
	if k == 0 {
		if isNew {
			// Nothing fits: do not leave an empty entry behind.
			s.abandonLocked(e)
		}
		s.mu.Unlock()
		s.finishEvictions(victims)
		return 0
	}
	need := needs[k]
	s.reserved += need
	e.pins++
	e.writing++
	// Stamps around the write only for a file with checked blocks to
	// carry over (splice.go); one checked meanwhile is dropped instead.
	restamp := s.splice && e.checkedStamp != (fileStamp{})
	s.mu.Unlock()
	s.finishEvictions(victims)

	var total int64
	for _, bl := range lens[:k] {
		total += bl
	}
	sums := make([]uint32, k)
	for i, off := 0, int64(0); i < k; i++ {
		if i < len(crcs) {
			sums[i] = crcs[i]
		} else {
			sums[i] = crc32.Checksum(p[off:off+lens[i]], castagnoli)
		}
		off += lens[i]
	}
	stored, alloc := 0, int64(-1)
	var before, after fileStamp
	stamped := false
	f, err := s.fileFor(e, true)
	if err == nil {
		var berr error
		if restamp {
			before, berr = stampOf(f)
		}
		var n int
		n, err = s.writeData(e, f, p[:total], first*s.blockSize)
		// Blocks wholly written before a failure are good.
		for off := int64(0); stored < k && off+lens[stored] <= int64(n); stored++ {
			off += lens[stored]
		}
		var st syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &st) == nil {
			alloc = st.Blocks * 512
			after, stamped = stampFrom(&st), restamp && berr == nil
		}
	}
	if err != nil {
		s.writeFailed(err)
	}

	var excess []*entry
	s.mu.Lock()
	s.reserved -= need
	e.writing--
	s.wroteLocked(e, before, after, stamped, err == nil && stored == k)
	if e.live {
		for i := 0; i < stored; i++ {
			e.present.set(first + int64(i))
			e.crcs[first+int64(i)] = sums[i]
		}
		if alloc >= 0 && e.writing == 0 {
			// No other write to e in flight: what the file occupies is
			// e's size (the estimates charged by the writes before ours
			// are replaced by it). With writes in flight, their blocks
			// may show in alloc while still counted in s.reserved.
			grew := alloc - e.bytes
			s.used += grew
			e.bytes = alloc
			if grew > need {
				// The file system took more than the data (an extent
				// block): make room for the excess now.
				excess, _ = s.makeRoomLocked(0, e, avail-grew)
			}
		} else {
			// Charge our estimate for what we stored (nothing, if the
			// file could not even be opened); the last write in flight
			// settles it.
			s.used += needs[stored]
			e.bytes += needs[stored]
		}
		if stored > 0 {
			s.markDirtyLocked(e, true)
			s.dirtyBlocks += stored
		}
	} else {
		stored = 0 // evicted while we wrote; its file is going away
	}
	// Our new entry got nothing (its file could not be created or
	// written): do not leave it behind, holding a place in the LRU. Not
	// an eviction: its file, if any, is left for the key's next entry
	// (removing it could race with that entry creating it).
	abandon := isNew && e.live && e.pins == 1 && e.writing == 0 && e.bytes == 0 && e.present.count() == 0
	var files openFiles
	if abandon {
		s.abandonLocked(e)
		files = s.detachFileLocked(e)
	}
	kick := s.dirtyBlocks >= flushBlocks
	finish := s.unpinLocked(e) && !abandon
	s.mu.Unlock()
	files.close()
	s.finishEvictions(excess)
	if finish {
		s.finishEvictions([]*entry{e})
	}
	if kick {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	s.writeBlocks.Add(int64(stored))
	for _, bl := range lens[:stored] {
		s.writeBytes.Add(bl)
	}
	return stored
}

// writeFailed counts a failed data write and logs the first of each kind.
func (s *Store) writeFailed(err error) {
	s.writeErrors.Add(1)
	kind := "other"
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		kind = "disk full"
	case errors.Is(err, syscall.EROFS):
		kind = "read-only file system"
	case errors.Is(err, fs.ErrPermission):
		kind = "permission denied"
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		kind = "cache directory missing"
	case errors.Is(err, syscall.EIO):
		kind = "I/O error"
	}
	s.logOnce("write: "+kind, "cache write failed; reads go to the store (logged once per kind)", "kind", kind, "err", err)
}

// makeRoomLocked evicts least recently used entries other than keep until
// need more bytes fit under the limit and above the free-space floor, or
// nothing is left to evict. avail is the volume's free space as last
// measured. It returns the evicted entries that must be finished outside
// the lock, and a test for whether n bytes now fit.
// LOCKS_REQUIRED(s.mu)
func (s *Store) makeRoomLocked(need int64, keep *entry, avail int64) ([]*entry, func(int64) bool) {
	// Evicted bytes count as free at once (pendingFree): the unlink
	// happens outside the lock, maybe later if the file is pinned.
	// A floor of 0 still keeps writes within the free space: with a
	// --cache-size above what the volume has left, a full disk would
	// otherwise fail every write (and index commit) with ENOSPC while
	// nothing is evicted.
	// Files handed out whole (whole.go) are read for as long as they are
	// held: they are not evicted (that would free nothing), and if
	// evicted all the same (Drop) they count until released.
	fit := func(n int64) bool {
		return s.used+s.heldEvicted+s.reserved+n <= s.limit &&
			avail+s.pendingFree-s.heldEvicted-s.reserved-n >= s.minFree
	}
	var victims []*entry
	for el := s.lru.Back(); el != nil && !fit(need); {
		e := el.Value.(*entry)
		el = el.Prev()
		if e == keep || e.holds > 0 {
			continue
		}
		if v := s.evictLocked(e); v != nil {
			victims = append(victims, v)
		}
	}
	return victims, fit
}

// evictLocked removes e from the live set and the index. It returns e if
// nobody has it pinned, and the caller must then call finishEvictions
// after unlocking; otherwise the last unpin does.
// LOCKS_REQUIRED(s.mu)
func (s *Store) evictLocked(e *entry) *entry {
	if !e.live {
		return nil
	}
	e.live = false
	s.lru.Remove(e.elem)
	e.elem = nil
	delete(s.entries, e.key)
	if e.own {
		delete(s.byObj, e.obj)
	}
	delete(s.dirty, e.key)
	s.deleted[e.key] = struct{}{}
	s.deleting[e.key] = &deletion{}
	s.used -= e.bytes
	s.pendingFree += e.bytes
	if e.holds > 0 {
		s.heldEvicted += e.bytes
	}
	s.evictions.Add(1)
	if e.pins == 0 {
		return e
	}
	return nil
}

// abandonLocked removes a new entry that never got a block, and so has no
// file to delete: unlike an eviction it needs no deletion to complete
// before the key is written again. (If a flush recorded it already, the
// next start drops the record: its file is missing.) LOCKS_REQUIRED(s.mu)
func (s *Store) abandonLocked(e *entry) {
	s.lru.Remove(e.elem)
	delete(s.entries, e.key)
	delete(s.byObj, e.obj)
	delete(s.dirty, e.key)
	e.live, e.elem = false, nil
}

// unpinLocked drops a pin and reports whether the caller must now finish
// the entry's eviction.
// LOCKS_REQUIRED(s.mu)
func (s *Store) unpinLocked(e *entry) bool {
	e.pins--
	return e.pins == 0 && !e.live
}

// finishEvictions closes and unlinks evicted, unpinned entries' files.
func (s *Store) finishEvictions(es []*entry) {
	for _, e := range es {
		if e == nil {
			continue
		}
		s.mu.Lock()
		f := s.detachFileLocked(e)
		s.mu.Unlock()
		f.close()
		if err := os.Remove(e.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("cannot remove evicted cache file", "err", err)
		}
		s.mu.Lock()
		if d := s.deleting[e.key]; d != nil {
			d.unlinked = true
			if d.committed {
				delete(s.deleting, e.key)
			}
		}
		s.pendingFree -= e.bytes
		s.mu.Unlock()
	}
}

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

// touchLocked marks e most recently used.
// LOCKS_REQUIRED(s.mu)
func (s *Store) touchLocked(e *entry) {
	s.lru.MoveToFront(e.elem)
	e.atime = time.Now().UnixNano()
	if !e.atimeDirty {
		e.atimeDirty = true
		s.dirty[e.key] = e
	}
}

// LOCKS_REQUIRED(s.mu)
func (s *Store) markDirtyLocked(e *entry, meta bool) {
	e.metaDirty = e.metaDirty || meta
	s.dirty[e.key] = e
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

	f, err := os.OpenFile(e.path, os.O_RDWR, 0)
	created := false
	if errors.Is(err, fs.ErrNotExist) && create {
		if err = s.dirRemoved(); err == nil {
			err = os.MkdirAll(filepath.Dir(e.path), 0o700)
		}
		if err == nil {
			f, err = os.OpenFile(e.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
			created = err == nil
			if errors.Is(err, fs.ErrExist) { // not ours to reset
				f, err = os.OpenFile(e.path, os.O_RDWR, 0)
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
		if e.bytes > 0 {
			s.used -= e.bytes
			e.bytes = 0
			s.markDirtyLocked(e, true)
		}
	}
	var toClose []openFiles
	for el := s.open.Back(); el != nil && s.open.Len() > s.hooks.maxOpen; {
		o := el.Value.(*entry)
		el = el.Prev()
		if o.pins == 0 {
			toClose = append(toClose, s.detachFileLocked(o))
		}
	}
	s.mu.Unlock()
	for _, c := range toClose {
		c.close()
	}
	return f, nil
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
// block) and volumes that refuse O_DIRECT use the page cache.
func (s *Store) writeData(e *entry, f *os.File, p []byte, off int64) (int, error) {
	n := 0
	m := len(p) &^ (directAlign - 1)
	if m > 0 && off%directAlign == 0 && uintptr(unsafe.Pointer(unsafe.SliceData(p)))%directAlign == 0 {
		if d := s.directFor(e, f); d != nil {
			w, err := s.hooks.writeAt(d, p[:m], off)
			switch {
			case err == nil:
				n = w
			case w == 0 && errors.Is(err, syscall.EINVAL):
				// Direct I/O refused after all: the page cache from now on.
				s.noDirect.Store(true)
			default:
				return w, err
			}
		}
	}
	if n == len(p) {
		return n, nil
	}
	w, err := s.hooks.writeAt(f, p[n:], off+int64(n))
	return n + w, err
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

// Stats returns the counters and current usage.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	used, n := s.used, int64(len(s.entries))
	s.mu.Unlock()
	return Stats{
		HitBlocks: s.hitBlocks.Load(), HitBytes: s.hitBytes.Load(),
		MissBlocks: s.missBlocks.Load(), MissBytes: s.missBytes.Load(),
		WriteBlocks: s.writeBlocks.Load(), WriteBytes: s.writeBytes.Load(),
		Evictions: s.evictions.Load(), CorruptBlocks: s.corrupt.Load(),
		WriteErrors: s.writeErrors.Load(),
		WholeChecks: s.wholeChecks.Load(), WholeCheckedBytes: s.wholeCheckedBytes.Load(),
		ReadChecks:    s.readChecks.Load(),
		SplicedBlocks: s.splicedBlocks.Load(), SplicedBytes: s.splicedBytes.Load(),
		Entries: n, UsedBytes: used, LimitBytes: s.limit,
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
	err := s.flush()
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

// checkPrivate makes sure no other user can change the cache under
// ferry (swap in forged data files, or links to write through): every
// access below root is by path, so whoever can rename root/v1, or any
// directory above it, controls what ferry reads and where it writes.
//   - Every directory above root must belong to ferry's user or to root
//     (uid 0), and be writable by nobody else unless sticky (as /tmp).
//   - root must belong to ferry's user or to root. If others may write to
//     it and it is not sticky, ferry makes it private (0700) when it owns
//     it and it holds nothing but the cache (a Kubernetes emptyDir is
//     created 0777), and refuses it otherwise: changing the mode of a
//     directory shared with other work would lock that work out.
//   - root/v1 must be ferry's own and a real directory.
//
// (A uid-mapped volume, NFS root_squash say, is refused too.)
func checkPrivate(root, dir string, log *slog.Logger) error {
	uid := uint32(os.Geteuid())
	trusted := func(st *unix.Stat_t) bool { return st.Uid == uid || st.Uid == 0 }
	othersMayWrite := func(st *unix.Stat_t) bool { return st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 }
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}
	var st unix.Stat_t
	for p := filepath.Dir(real); ; p = filepath.Dir(p) {
		if err := unix.Stat(p, &st); err != nil {
			return fmt.Errorf("cache dir: %w", err)
		}
		if !trusted(&st) || othersMayWrite(&st) {
			return fmt.Errorf("cache dir %s: %w: %s above it is owned by uid %d (mode %#o): another user could move the cache and replace it; use a directory on a path only ferry's user or root can change",
				root, ErrInvalid, p, st.Uid, st.Mode&0o7777)
		}
		if p == "/" { // real is absolute
			break
		}
	}
	if err := unix.Stat(real, &st); err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}
	if !trusted(&st) {
		return fmt.Errorf("cache dir %s: %w: owned by uid %d, neither ferry's (%d) nor root's", root, ErrInvalid, st.Uid, uid)
	}
	if othersMayWrite(&st) {
		ents, err := os.ReadDir(real)
		if err != nil {
			return fmt.Errorf("cache dir: %w", err)
		}
		for _, e := range ents {
			if e.Name() != "v1" && e.Name() != "lost+found" {
				return fmt.Errorf("cache dir %s: %w: writable by other users (mode %#o) and holding more than the cache (%s); give ferry a directory of its own below it",
					root, ErrInvalid, st.Mode&0o7777, e.Name())
			}
		}
		if st.Uid != uid {
			return fmt.Errorf("cache dir %s: %w: writable by other users (mode %#o) and not ferry's to change (owner uid %d)",
				root, ErrInvalid, st.Mode&0o7777, st.Uid)
		}
		if err := os.Chmod(real, 0o700); err != nil {
			return fmt.Errorf("cache dir: %w", err)
		}
		log.Info("cache dir was writable by other users; made it private", "dir", root, "mode_was", fmt.Sprintf("%#o", st.Mode&0o7777))
	}
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("cache dir %s: %w: not a directory (a symbolic link?)", dir, ErrInvalid)
	}
	if st.Uid != uid {
		return fmt.Errorf("cache dir %s: %w: owned by uid %d, not by ferry's uid %d", dir, ErrInvalid, st.Uid, uid)
	}
	return nil
}

// errDirRemoved: the cache directory was deleted under a running store.
var errDirRemoved = fmt.Errorf("the cache directory was removed while in use: %w", fs.ErrNotExist)

// dirRemoved reports errDirRemoved if the cache directory this store
// locked is gone (its lock file has no name left). Files are then not
// created again: the new directory would have neither the lock, which
// keeps a second process out, nor the index, which the store goes on
// committing to its deleted file. Reads of what is still open and
// readable go on; everything else goes to the store.
func (s *Store) dirRemoved() error {
	var st unix.Stat_t
	if err := unix.Fstat(int(s.lock.Fd()), &st); err == nil && st.Nlink == 0 {
		return errDirRemoved
	}
	return nil
}

// lockDir takes an exclusive flock on dir/lock, so that a second ferry on
// the same cache directory fails at once with a clear error, before it
// touches the index (a start that finds the index half-opened by a crash
// moves it aside: see openIndex).
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cache dir lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("cache dir %s is in use by another ferry process: %w", dir, err)
		}
		return nil, fmt.Errorf("cache dir lock: %w", err)
	}
	return f, nil
}
