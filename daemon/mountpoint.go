package daemon

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/jacobsa/fuse"
	"golang.org/x/sys/unix"

	"ferry/flags"
	"ferry/mountinfo"
)

// checkMountPoint gives a clear error before anything is started. With
// repair, a dead ferry mount on dir is detached first (repairDeadMount);
// without nonEmpty, a directory with entries is refused.
func checkMountPoint(dir string, nonEmpty, repair bool) error {
	if fd, ok := flags.FuseFD(dir); ok {
		return checkFuseFD(fd)
	}
	var (
		fi  os.FileInfo
		err error
	)
	if repair {
		fi, err = repairDeadMount(dir)
	} else {
		fi, err = os.Stat(dir)
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("mount point %s does not exist", dir)
	case errors.Is(err, syscall.ENOTCONN):
		return fmt.Errorf("mount point %s is a dead FUSE mount; run fusermount3 -u %s first", dir, dir)
	case err != nil:
		return fmt.Errorf("mount point: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("mount point %s is not a directory", dir)
	}
	// Stacking a second ferry on the same directory (mount -a twice) only
	// hides the first, and unmounting would then hit the wrong one.
	top, _ := mountinfo.Top(dir)
	if top.FSType == mountinfo.FerryType {
		return fmt.Errorf("%s is already a ferry mount; unmount it first (fusermount3 -u %s)", dir, dir)
	}
	// An automount trigger (fstab x-systemd.automount): opening it to look
	// for entries would wait for the very mount we are making. An autofs
	// mount point has no entries of its own to hide.
	if !nonEmpty && top.FSType != "autofs" {
		return checkEmpty(dir)
	}
	return nil
}

// fuseDev is /dev/fuse's device number (10, 229).
var fuseDev = unix.Mkdev(10, 229)

// checkFuseFD checks that descriptor fd is an open /dev/fuse: the helper
// that mounted it passed it in, and mounting is over.
func checkFuseFD(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("mount point /dev/fd/%d: descriptor %d is not open (%v): a privileged helper opens /dev/fuse, mounts it, and passes the descriptor to ferry", fd, fd, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != fuseDev {
		return fmt.Errorf("mount point /dev/fd/%d: descriptor %d is not /dev/fuse", fd, fd)
	}
	return nil
}

// checkEmpty refuses to hide files: mounting over a directory that has
// entries makes them invisible until unmount, which is rarely meant.
func checkEmpty(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	if len(names) > 0 {
		return fmt.Errorf("mount point %s is not empty (mounting would hide its files); give --nonempty (fstab: nonempty) to mount over it anyway", dir)
	}
	return nil
}

// repairDeadMount detaches dead ferry mounts from dir: a daemon that was
// killed (kill -9, OOM) leaves its mount behind, and every access to dir
// then fails with ENOTCONN. Containers and systemd restart ferry on the
// same directory, so ferry clears its own dead mounts instead of
// refusing; a dead mount of another file system is left alone. It
// returns dir's Stat after the repair.
func repairDeadMount(dir string) (os.FileInfo, error) {
	// Mounts may be stacked; each detach uncovers the next one.
	for range 8 {
		if top, _ := mountinfo.Top(dir); top.FSType != mountinfo.FerryType || !deadFUSE(dir) {
			break
		}
		if derr := detachMount(dir); derr != nil {
			return nil, fmt.Errorf("mount point %s is a dead ferry mount and cannot be detached: %v; run fusermount3 -uz %s", dir, derr, dir)
		}
	}
	return os.Stat(dir)
}

// deadFUSE reports whether the FUSE mount on dir has lost its daemon.
// stat(2) is no test: the kernel may answer it from its attribute cache
// (for ever, with --metadata-ttl -1); statfs(2) always asks the daemon.
// A daemon that is alive but stuck never answers: after a few seconds
// the mount counts as alive (and is then refused as already mounted),
// so that mount(8) never hangs on it; the goroutine is left behind.
func deadFUSE(dir string) bool {
	res := make(chan error, 1)
	go func() {
		var st syscall.Statfs_t
		res <- syscall.Statfs(dir, &st)
	}()
	select {
	case err := <-res:
		return errors.Is(err, syscall.ENOTCONN)
	case <-time.After(5 * time.Second):
		return false
	}
}

// detachMount detaches the topmost mount on dir lazily (umount -l): the
// mount point is free at once, and a FUSE daemon still alive keeps
// serving the files open on it until they are closed. Root unmounts
// directly; other users go through fusermount, which may detach their
// own FUSE mounts.
func detachMount(dir string) error {
	err := syscall.Unmount(dir, syscall.MNT_DETACH)
	if err == nil || !errors.Is(err, syscall.EPERM) {
		return err
	}
	for _, name := range []string{"fusermount3", "fusermount"} {
		path, lerr := exec.LookPath(name)
		if lerr != nil {
			continue
		}
		out, ferr := exec.Command(path, "-u", "-z", dir).CombinedOutput()
		if ferr != nil {
			return fmt.Errorf("%s -u -z: %v: %s", name, ferr, oneLine(string(out)))
		}
		return nil
	}
	return err
}

// unmountRetry unmounts dir, retrying while it fails (typically EBUSY).
func unmountRetry(dir string, attempts int, wait time.Duration) error {
	var err error
	for i := 0; i < attempts; i++ {
		if err = fuse.Unmount(dir); err == nil {
			return nil
		}
		time.Sleep(wait)
	}
	return err
}
