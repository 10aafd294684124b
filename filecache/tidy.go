package filecache

import (
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// tidy removes, in the background, the data files that no entry claims
// (left by a crash between a file's creation and the commit of its entry,
// or by a rebuilt index). Open used to do this before it returned, and
// walking a million cache files delayed the mount by tens of seconds;
// reads do not need it. It stops early at Close. (Rows of the index that
// are no entry's are found by the scan of an Open without a snapshot:
// an entry's rows are written and deleted together, so only damage, or
// an eviction after Close's last commit, leaves any.)
func (s *Store) tidy(since time.Time) {
	defer close(s.tidied)
	t0 := time.Now()
	files, orphans := s.removeOrphans(since)
	s.log.Info("cache tidied", "files", files, "orphan_files", orphans, "seconds", time.Since(t0).Seconds())
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
