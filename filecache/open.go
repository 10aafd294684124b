package filecache

import (
	"bytes"
	"cmp"
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/dustin/go-humanize"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// Open opens or creates the cache in cfg.Dir. A corrupt index is moved
// aside (and logged), not an error; another process holding the index is.
func Open(cfg Config) (*Store, error) {
	return open(cfg, hooks{})
}

func open(cfg Config, h hooks) (*Store, error) {
	start := time.Now()
	cfg, err := checkConfig(cfg)
	if err != nil {
		return nil, err
	}
	root, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	s := newStore(cfg, h.withDefaults(), root)
	if err := s.claimDir(); err != nil {
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
	if err := s.loadIndex(); err != nil {
		return nil, err
	}
	avail, _, err := s.hooks.statfs(s.dir)
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
	s.liveDB.Store(s.db)
	releaseIndexPages(s.db) // the scan of access times mapped them
	go s.flusher()
	go s.releaser()
	go s.tidy(start)
	opened = true
	s.log.Info("cache opened", "dir", s.dir, "entries", s.cold.len(), "from_snapshot", s.fromSnapshot, "used_bytes", s.used,
		"limit_bytes", s.limit, "min_free_bytes", s.minFree, "block_size", s.blockSize)
	return s, nil
}

// checkConfig returns cfg with its defaults filled in, or an error
// wrapping ErrInvalid.
func checkConfig(cfg Config) (Config, error) {
	if cfg.Dir == "" {
		return cfg, fmt.Errorf("cache dir is empty: %w", ErrInvalid)
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = DefaultBlockSize
	}
	if err := validateBlockSize(cfg.BlockSize); err != nil {
		return cfg, err
	}
	if cfg.MaxSize < 0 || cfg.MinFree < 0 {
		return cfg, fmt.Errorf("cache max size and min free must not be negative: %w", ErrInvalid)
	}
	// Limits that leave no room would empty the cache at open (it evicts
	// down to them) and then store nothing, with no word why.
	if cfg.MaxSize > 0 && cfg.MaxSize < cfg.BlockSize {
		return cfg, fmt.Errorf("the cache size (--cache-size) %s is smaller than one cache block (--cache-block-size %s): %w",
			humanize.IBytes(uint64(cfg.MaxSize)), humanize.IBytes(uint64(cfg.BlockSize)), ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// withDefaults fills in the real system calls for the hooks tests leave
// unset.
func (h hooks) withDefaults() hooks {
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
	if h.maxWarm <= 0 {
		h.maxWarm = maxWarm
	}
	if h.bootID == nil {
		h.bootID = readBootID
	}
	return h
}

// newStore is an empty store for cfg (checked) in root, Dir made
// absolute; it touches no file.
func newStore(cfg Config, h hooks, root string) *Store {
	return &Store{
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
		releasing:   make(chan struct{}),
		tidied:      make(chan struct{}),
		entries:     map[string]*entry{},
		byObj:       map[Key]*entry{},
		lru:         list.New(),
		open:        list.New(),
		deleting:    map[string]*deletion{},
		dirty:       map[string]*entry{},
		deleted:     map[uint64]string{},
		loggedKinds: map[string]bool{},
		splice:      cfg.Splice,
		checkWrites: cfg.CheckWrites,
		bootID:      h.bootID(),
	}
}

// claimDir creates the cache's directories, makes sure no other user can
// change them (checkPrivate) and locks Dir/v1 (s.lock), which the caller
// closes if the open fails after all.
func (s *Store) claimDir() error {
	// Nothing is created below v1 before v1 is known to be ours.
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return fmt.Errorf("create cache dir: %w", err)
	}
	// (A file system that reports no size, ramfs or an unlimited tmpfs,
	// is unknown, not full.)
	if _, total, err := s.hooks.statfs(s.root); err == nil && total > 0 && s.minFree >= total {
		return fmt.Errorf("the free space to leave (--cache-min-free) %s is not below the size of the cache's file system (%s): "+
			"the cache could hold nothing (a percentage, as --cache-min-free 10%%, scales with the volume): %w",
			humanize.IBytes(uint64(s.minFree)), humanize.IBytes(uint64(total)), ErrInvalid)
	}
	if err := os.Mkdir(s.dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create cache dir: %w", err)
	}
	if err := checkPrivate(s.root, s.dir, s.log); err != nil {
		return err
	}
	if err := os.Chmod(s.dir, 0o700); err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}
	if err := os.MkdirAll(s.dataDir, 0o700); err != nil {
		return fmt.Errorf("create cache dir: %w", err)
	}
	lock, err := lockDir(s.dir)
	if err != nil {
		return err
	}
	s.lock = lock
	return nil
}

// loadIndex opens the index (s.db) and loads it. If load's clean-up
// commit finds the index damaged, the cache starts empty, with a fresh
// index. On error, no index is open.
func (s *Store) loadIndex() error {
	t0 := time.Now()
	db, idx, err := openIndex(filepath.Join(s.dir, "index.db"), s.fileBytes, s.log.Error)
	if err != nil {
		return err
	}
	switch {
	case idx.converted > 0:
		s.log.Info("cache index converted to the current format, once", "entries", idx.converted,
			"seconds", time.Since(t0).Seconds())
	case idx.converted < 0:
		s.log.Error("cache index: no room on the volume to convert it to the current format; " +
			"starting an empty cache, its files removed in the background")
	}
	s.db = db
	s.fromSnapshot = idx.fromSnapshot
	err = s.load(idx)
	if err == nil {
		return nil
	}
	if !errors.Is(err, errIndexDamaged) {
		db.Close()
		return err
	}
	// The damaged handle is dropped, not closed (see rebuildIndex).
	// Damage that only a commit showed: start again with an empty
	// index; every data file is then an orphan and goes.
	if s.db, err = s.freshIndex("cache index is corrupt; moving it aside and starting an empty cache", err); err != nil {
		return err
	}
	s.cold, s.used, s.nextRow = coldSet{}, 0, 1
	return nil
}

// fileBytes is the allocated bytes of the data file of key, or -1 if
// there is none.
func (s *Store) fileBytes(key string) int64 {
	var st unix.Stat_t
	if err := unix.Lstat(s.pathFor(key), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return -1
	}
	return st.Blocks * 512
}

// load queues the index's entries cold (cold.go), least recent first,
// and counts what they use; rows that are no entry's (idx.bad and
// idx.badRows), and those of an entry whose key a later one has, go. Nothing else is read
// now: records are checked as they are warmed, and files that no entry
// claims are removed after Open returns (tidy).
func (s *Store) load(idx loadedIndex) error {
	emptied, err := s.claimBlockSize()
	if err != nil {
		return fmt.Errorf("cache index: %w", err)
	}
	rows, bad, drop := idx.rows, idx.bad, idx.badRows
	s.nextRow = max(idx.next, 1)
	if emptied {
		rows, bad, drop, s.nextRow = nil, nil, nil, 1
	}
	slices.SortStableFunc(rows, func(a, b coldRow) int { return cmp.Compare(a.atime, b.atime) })
	s.cold.pos = make(map[uint64]int32, len(rows))
	for _, r := range rows {
		if s.cold.has(r.key) {
			// Only damage makes two entries of one key: keep the
			// more recent.
			sl, _ := s.cold.take(r.key)
			s.used -= sl.bytes
			drop = append(drop, sl.row)
		}
		s.cold.add(r.key, r.row, r.bytes)
		s.used += r.bytes
	}
	if len(bad)+len(drop) == 0 {
		return nil
	}
	s.log.Info("cache cleaned up", "stale_rows", len(bad), "stale_entries", len(drop))
	if err := s.deleteRows(bad, drop); err != nil {
		return fmt.Errorf("clean cache index: %w", err)
	}
	return nil
}

// claimBlockSize records the store's block size in the index. If the
// index was written with another, every entry is dropped (emptied): one
// cached with another block size is no use, and finding them one by one
// as they are warmed would leave the rest taking space until evicted.
// Their files go with the other orphans (tidy).
func (s *Store) claimBlockSize() (emptied bool, err error) {
	err = guard(func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			mb, err := tx.CreateBucketIfNotExists(metaBucket)
			if err != nil {
				return err
			}
			var want [8]byte
			binary.LittleEndian.PutUint64(want[:], uint64(s.blockSize))
			if v := mb.Get(blockSizeKey); v != nil && !bytes.Equal(v, want[:]) {
				s.log.Info("cache block size changed: dropping the cache", "block_size", s.blockSize)
				emptied = true
				if err := tx.DeleteBucket(rowsBucket); err != nil {
					return err
				}
				if _, err := tx.CreateBucket(rowsBucket); err != nil {
					return err
				}
			}
			return mb.Put(blockSizeKey, want[:])
		})
	})
	return emptied, err
}

// deleteRows deletes the index rows keys, and every row of the entries
// at rows, in one commit.
func (s *Store) deleteRows(keys [][]byte, rows []uint64) error {
	return guard(func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(rowsBucket)
			for _, k := range keys {
				if err := b.Delete(k); err != nil {
					return err
				}
			}
			for _, r := range rows {
				if err := deleteEntryRows(b, r); err != nil {
					return err
				}
			}
			return nil
		})
	})
}
