package filecache

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// statfsFunc reports the bytes available to us and the volume size.
type statfsFunc func(path string) (avail, total int64, err error)

func realStatfs(path string) (int64, int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), nil
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
