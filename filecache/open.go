package filecache

import (
	"container/list"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"

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
	go s.flusher()
	opened = true
	s.log.Info("cache opened", "dir", s.dir, "entries", len(s.entries), "used_bytes", s.used,
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
	db, rows, bad, err := openIndex(filepath.Join(s.dir, "index.db"), s.log.Error)
	if err != nil {
		return err
	}
	s.db = db
	err = s.load(rows, bad)
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
	// The work load marked (entries migrated from the old format) was
	// for the index just moved aside.
	s.entries, s.byObj, s.lru, s.used = map[string]*entry{}, map[Key]*entry{}, list.New(), 0
	s.dirty, s.deleted = map[string]*entry{}, map[string]struct{}{}
	if err := s.load(nil, nil); err != nil {
		s.db.Close()
		return err
	}
	return nil
}

// load reconciles the index with the data files: entries whose file is
// missing (or whose block size changed) go, files without an entry go,
// and usage is recounted from what the files really occupy.
func (s *Store) load(rows []loadedEntry, bad []string) error {
	var drop []string
	drop = append(drop, bad...)
	migrated, lost := 0, 0
	sort.Slice(rows, func(i, j int) bool { return rows[i].atime < rows[j].atime })
	for _, r := range rows {
		e := &entry{
			key: r.key, obj: Key{Name: r.rec.name, Version: r.rec.version, Size: r.rec.size},
			nblocks: numBlocks(r.rec.size, r.rec.blockSize),
			present: r.rec.present, crcs: r.rec.crcs, atime: r.atime, live: true,
		}
		if r.rec.blockSize != s.blockSize {
			drop = append(drop, r.key)
			os.Remove(s.pathFor(r.key))
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(s.pathFor(r.key), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
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
		if r.rec.format == recordV1 {
			// Written again in format 2 by the first commit.
			s.markAllDirtyLocked(e)
			migrated++
		}
		lost += r.lostChunks
	}
	if migrated > 0 {
		s.log.Info("cache index: entries of the unchunked format are written again, chunked, at the first commit", "entries", migrated)
	}
	orphans := s.removeOrphans()
	if orphans > 0 || len(drop) > 0 || lost > 0 {
		s.log.Info("cache cleaned up", "orphan_files", orphans, "stale_entries", len(drop), "damaged_chunks", lost)
	}
	if len(drop) == 0 {
		return nil
	}
	if err := s.deleteRows(drop); err != nil {
		return fmt.Errorf("clean cache index: %w", err)
	}
	return nil
}

// removeOrphans removes anything under data/ that is not an entry's file,
// and returns how many it found. WalkDir does not follow symlinks, and
// Remove on a link removes the link.
func (s *Store) removeOrphans() int {
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
		if e, ok := s.entries[d.Name()]; !ok || s.pathFor(e.key) != p {
			orphans++
			os.Remove(p)
		}
		return nil
	})
	return orphans
}

// deleteRows deletes the index rows of keys, in one commit.
func (s *Store) deleteRows(keys []string) error {
	return guard(func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			for _, k := range keys {
				if err := tx.Bucket(entriesBucket).Delete([]byte(k)); err != nil {
					return err
				}
				if err := tx.Bucket(atimeBucket).Delete([]byte(k)); err != nil {
					return err
				}
				if err := deleteChunks(tx.Bucket(chunksBucket), []byte(k)); err != nil {
					return err
				}
			}
			return nil
		})
	})
}
