package filecache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// tidy removes, in the background, what no entry claims: data files
// (left by a crash between a file's creation and the commit of its entry,
// or by a rebuilt index) and chunk rows (left by an older ferry). Open
// used to do this before it returned, and walking a million cache files
// delayed the mount by tens of seconds; reads do not need it. It stops
// early at Close.
func (s *Store) tidy(since time.Time) {
	defer close(s.tidied)
	t0 := time.Now()
	files, orphans := s.removeOrphans(since)
	stray, err := s.removeStrayChunks()
	if err != nil {
		s.logOnce("index tidy", "cache index: could not remove chunks of entries that are gone", "err", err)
	}
	s.log.Info("cache tidied", "files", files, "orphan_files", orphans, "stray_chunks", stray,
		"seconds", time.Since(t0).Seconds())
}

// stopping reports whether Close has begun.
func (s *Store) stopping() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// removeOrphans removes anything under data/ that is no entry's file, one
// directory at a time, and returns how many files it saw and how many
// it removed. A file changed
// since the walk began is left alone: it may be one a new entry is
// about to claim (an entry registers before it opens its file, but a
// file of a previous run that a new entry opens again keeps its times).
// Removing a file an entry claims loses its blocks, never serves wrong
// ones: each is checked against its CRC.
func (s *Store) removeOrphans(since time.Time) (files, orphans int) {
	subdirs, err := os.ReadDir(s.dataDir)
	if err != nil {
		return 0, 0
	}
	for _, d := range subdirs {
		if s.stopping() {
			break
		}
		p := filepath.Join(s.dataDir, d.Name())
		if !d.IsDir() || len(d.Name()) != 2 {
			orphans++
			os.RemoveAll(p)
			continue
		}
		names, err := os.ReadDir(p)
		if err != nil {
			continue
		}
		files += len(names)
		var unclaimed []string
		s.mu.Lock()
		for _, n := range names {
			if !s.claimedLocked(d.Name(), n.Name()) {
				unclaimed = append(unclaimed, n.Name())
			}
		}
		s.mu.Unlock()
		for _, n := range unclaimed {
			var st unix.Stat_t
			f := filepath.Join(p, n)
			if unix.Lstat(f, &st) != nil || !changedBefore(&st, since) {
				continue
			}
			orphans++
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				os.RemoveAll(f)
			} else {
				os.Remove(f)
			}
		}
	}
	return files, orphans
}

// claimedLocked reports whether data/dir/name is the file of an entry,
// warm, cold or being deleted. LOCKS_REQUIRED(s.mu)
func (s *Store) claimedLocked(dir, name string) bool {
	if len(name) < 2 || name[:2] != dir {
		return false
	}
	if _, ok := s.entries[name]; ok {
		return true
	}
	if _, ok := s.deleting[name]; ok {
		return true
	}
	ck, ok := coldKeyOf(name)
	return ok && s.cold.has(ck)
}

// changedBefore reports whether the file of st was last changed (its
// data or its inode) before t.
func changedBefore(st *unix.Stat_t, t time.Time) bool {
	return time.Unix(st.Ctim.Unix()).Before(t) && time.Unix(st.Mtim.Unix()).Before(t)
}

// removeStrayChunks deletes the chunk rows of entries that are neither
// warm nor cold, and returns how many. Only objects over one chunk
// (16 MiB at the default block size) have chunk rows, so the walk is
// short next to the entries.
func (s *Store) removeStrayChunks() (int, error) {
	db := s.liveDB.Load()
	if db == nil {
		return 0, nil
	}
	var keys [][]byte
	err := guard(func() error {
		return db.View(func(tx *bolt.Tx) error {
			c := tx.Bucket(chunksBucket).Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				keys = append(keys, append([]byte(nil), k...))
			}
			return nil
		})
	})
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	// Checked under flushMu: no commit runs between the check and the
	// delete, so none writes a chunk of an entry made meanwhile.
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if s.db == nil || s.stopping() {
		return 0, nil
	}
	s.mu.Lock()
	stray := keys[:0]
	for _, k := range keys {
		if len(k) != 68 || !s.claimedLocked(string(k[:2]), string(k[:64])) {
			stray = append(stray, k)
		}
	}
	s.mu.Unlock()
	if len(stray) == 0 {
		return 0, nil
	}
	err = guard(func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			cb := tx.Bucket(chunksBucket)
			for _, k := range stray {
				if err := cb.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if errors.Is(err, errIndexDamaged) {
		// As in a commit (flush): the index is written again from
		// memory.
		if rerr := s.rebuildIndex(err); rerr != nil {
			return 0, fmt.Errorf("%w; rebuilding it: %w", err, rerr)
		}
	}
	return len(stray), err
}
