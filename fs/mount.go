package fs

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jacobsa/fuse"
	"github.com/jacobsa/fuse/fuseutil"
	"golang.org/x/sys/unix"
)

// MountOptions are the kernel-facing choices of one mount.
type MountOptions struct {
	// AllowOther lets users other than the mounting one see the files.
	AllowOther bool
	// ReadAheadKB sets the kernel readahead of the mount
	// (/sys/class/bdi/<dev>/read_ahead_kb); 0 keeps the kernel's value.
	ReadAheadKB int
	// MaxBackground sets how many async requests (readahead) the kernel
	// keeps in flight on the connection, and its congestion threshold to
	// 3/4 of it, in FUSE_INIT; 0 keeps the kernel's 12 and 9. At most
	// 65535.
	MaxBackground int
	// FSName is shown by mount(8) and in /proc/mounts, e.g. the bucket URL;
	// "" uses the bucket's name.
	FSName string
	// Debug logs every FUSE op to the Config.Logger at debug level.
	Debug bool
	// KernelOptions are generic mount(2) flags: dev, nodev, suid, nosuid,
	// exec, noexec, atime, noatime. Of a pair, the last given wins. A FUSE
	// mount is nodev,nosuid unless told otherwise.
	KernelOptions []string
}

// opposite pairs the generic mount flags; each is its partner's undoing.
var opposite = map[string]string{
	"dev": "nodev", "nodev": "dev", "suid": "nosuid", "nosuid": "suid",
	"exec": "noexec", "noexec": "exec", "atime": "noatime", "noatime": "atime",
}

// kernelOptions turns KernelOptions into jacobsa/fuse's option map, which
// it maps to mount(2) flags; an unknown one is an error, not data for the
// FUSE driver (which would refuse the mount with a bare EINVAL).
func kernelOptions(opts []string, into map[string]string) error {
	for _, o := range opts {
		other, ok := opposite[o]
		if !ok {
			return fmt.Errorf("fs: %q is not a generic mount flag", o)
		}
		delete(into, other)
		into[o] = ""
	}
	return nil
}

// Mount mounts a read-only file system over cfg.Bucket at dir. The caller
// owns the returned mount: Join waits for it to end, fuse.Unmount(dir)
// ends it.
func Mount(ctx context.Context, dir string, cfg Config, opts MountOptions) (*fuse.MountedFileSystem, error) {
	fsys, err := newFileSystem(cfg, nil)
	if err != nil {
		return nil, err
	}
	mfs, err := mountFileSystem(ctx, dir, fsys, opts)
	if err == nil && cfg.Control != nil {
		cfg.Control.bind(fsys)
	}
	return mfs, err
}

func mountFileSystem(ctx context.Context, dir string, fsys *fileSystem, opts MountOptions) (*fuse.MountedFileSystem, error) {
	fsName := opts.FSName
	if fsName == "" {
		fsName = fsys.meta.BucketName()
	}
	mc := mountConfig(ctx, fsName, fsys, opts)
	mc.Options = map[string]string{}
	if opts.AllowOther {
		mc.Options["allow_other"] = ""
	}
	if err := kernelOptions(opts.KernelOptions, mc.Options); err != nil {
		return nil, err
	}
	// Op metrics wrap the file system; the notifier lets Control tell the
	// kernel to forget names (control.go).
	var served fuseutil.FileSystem = fsys
	if fsys.ops != nil {
		served = &instrumented{FileSystem: fsys, m: fsys.ops}
	}
	server := &servedServer{
		inner: fuse.NewServerWithNotifier(fsys.conn.notifier, fuseutil.NewFileSystemServer(served)),
		conn:  fsys.conn,
		fs:    fsys,
	}
	mfs, err := fuse.Mount(dir, server, mc)
	if err != nil {
		err = fmt.Errorf("fs: mount %s on %s: %w", fsName, dir, err)
		// Root mounts directly; others go through fusermount3 (a root
		// without CAP_SYS_ADMIN too, for which none of these causes holds).
		if os.Geteuid() != 0 && strings.Contains(err.Error(), "fusermount") {
			if hint := userMountHint(currentUserMount(), opts.AllowOther); hint != "" {
				err = fmt.Errorf("%w (%s)", err, hint)
			}
		}
		return nil, err
	}
	fsys.raiseReadAhead(dir, opts.ReadAheadKB)
	return mfs, nil
}

// mountConfig is the FUSE configuration of a mount of fsys named fsName.
func mountConfig(ctx context.Context, fsName string, fsys *fileSystem, opts MountOptions) *fuse.MountConfig {
	mc := &fuse.MountConfig{
		// Ops carry ctx's values but not its cancellation: the mount
		// outlives the call that made it.
		OpContext: context.WithoutCancel(ctx),
		FSName:    fsName,
		Subtype:   "ferry",
		ReadOnly:  true,
		// default_permissions stays on (DisableDefaultPermissions false):
		// the kernel checks Uid/Gid/modes, so we need not.
		// jacobsa logs every failed op (EROFS, ENOENT on open...) with only
		// the errno; fs.errno already logged the store's real error, so
		// these go to debug.
		ErrorLogger: slog.NewLogLogger(fsys.log.Handler(), slog.LevelDebug),
		// Writeback caching makes the kernel keep its own mtime and size
		// and ignore ours; a read-only mount that follows the store must
		// not have it.
		DisableWritebackCaching: true,
		// Several reads of one file in flight at once: readahead and the
		// application's read overlap instead of alternating.
		EnableAsyncReads: true,
		// One thread's O_DIRECT submissions through libaio or io_uring
		// do not wait for each other's replies, and an O_DIRECT read
		// larger than a FUSE request goes out as several at once:
		// without it the kernel sends them one round trip at a time
		// (issue 32: 28 IOPS against 419 for 16 threads;
		// docs/notes/2026-12-02-async-dio.md).
		EnableAsyncDIO: true,
		// Lookups and readdirs of one directory in parallel (a data loader
		// opening thousands of files in one directory).
		EnableParallelDirOps: true,
		// Every listing page is a readdirplus, and ferry chooses which
		// give attributes (listuse.go), not the kernel ("auto").
		EnableReaddirplus:     true,
		EnableAutoReaddirplus: false,
		// 256 pages = 1 MiB per FUSE read, the most the kernel allows
		// without raising /proc/sys/fs/fuse/max_pages_limit, and the most
		// jacobsa/fuse serves from its own buffer (Dst). It also sets
		// max_readahead to 1 MiB; ReadAheadKB raises the window later.
		MaxPages: 256,
		// ferry writes nothing, so the kernel may send it 4 KiB writes
		// at most (each answered EROFS). jacobsa/fuse sizes the buffer
		// of every request it holds at a page more than this: at the
		// 1 MiB default, the hundred-odd requests a busy mount has in
		// flight (lookups and forgets of a DataLoader's random opens)
		// held over 100 MiB. A buffer of 8 KiB is the least the kernel
		// takes, and holds any request but a write: names are at most
		// 255 bytes, and a batch of forgets fills what there is.
		MaxWrite: 4096,
		// Files held whole in the disk cache are read by the kernel from
		// the cache file (passthrough.go), when it can.
		EnablePassthrough: fsys.pt.on,
		// Files read at random are opened for direct I/O (splice.go),
		// and must still map.
		EnableDirectIOAllowMmap: fsys.sp.on,
		// The kernel's queue of readahead requests (12 by default, 9
		// before it throttles): at 12, 4 sequential readers of cache
		// files kept the disk less busy than the same readers of local
		// files did (docs/notes/2026-11-30-kernel-queue.md). Set in
		// FUSE_INIT, so that it
		// holds where the FUSE control file system is not mounted
		// (containers).
		MaxBackground: uint16(min(max(opts.MaxBackground, 0), 65535)),
		// An interrupt cancels an op only if its caller is quitting
		// (interrupt.go).
		OnInterrupt: fsys.interrupted,
	}
	if opts.Debug {
		mc.DebugLogger = slog.NewLogLogger(fsys.log.Handler(), slog.LevelDebug)
	}
	return mc
}

// raiseReadAhead sets the kernel's readahead window for the mount on dir
// to kb KiB (0 leaves it). jacobsa/fuse fixes max_readahead at 1 MiB in
// FUSE_INIT; the kernel's window for this mount is its bdi's
// read_ahead_kb, which can be raised after mounting. Not on /dev/fd/N:
// the mount point, and its readahead, are the helper's.
func (fs *fileSystem) raiseReadAhead(dir string, kb int) {
	if _, external := parseFuseFD(dir); external || kb <= 0 {
		return
	}
	if err := setReadAhead(dir, kb); err != nil {
		// Not fatal: reads still work, only with the default window
		// (e.g. sysfs read-only in a container).
		fs.log.Warn("fs: cannot set kernel readahead", "dir", dir, "kb", kb, "err", err)
	}
}

// parseFuseFD reports whether dir is /dev/fd/N, a /dev/fuse descriptor
// that a privileged helper opened and mounted (jacobsa/fuse then serves it
// without mounting).
func parseFuseFD(dir string) (int, bool) {
	n, ok := strings.CutPrefix(dir, "/dev/fd/")
	if !ok {
		return 0, false
	}
	fd, err := strconv.Atoi(n)
	return fd, err == nil && fd >= 0
}

// mountDev is the device number of the file system mounted at dir.
func mountDev(dir string) (major, minor uint32, err error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, 0, err
	}
	dev := uint64(st.Dev)
	return unix.Major(dev), unix.Minor(dev), nil
}

// bdiPath is the sysfs file of the mount's readahead: fuse registers its
// backing device as "<major>:<minor>" of the mount's st_dev.
func bdiPath(dir string) (string, error) {
	major, minor, err := mountDev(dir)
	if err != nil {
		return "", err
	}
	return filepath.Join("/sys/class/bdi", fmt.Sprintf("%d:%d", major, minor), "read_ahead_kb"), nil
}

func setReadAhead(dir string, kb int) error {
	p, err := bdiPath(dir)
	if err != nil {
		return err
	}
	return os.WriteFile(p, []byte(strconv.Itoa(kb)+"\n"), 0)
}

// userMountEnv is what a user's mount through fusermount3 depends on.
type userMountEnv struct {
	uid int
	// fusermount reports whether fusermount3 (or fusermount) is on PATH.
	fusermount bool
	// devFuse is the error of opening /dev/fuse for reading and writing
	// as this user, nil if it may.
	devFuse error
	// fuseConf is /etc/fuse.conf's text ("" if there is none).
	fuseConf string
}

func currentUserMount() userMountEnv {
	env := userMountEnv{uid: os.Getuid()}
	for _, name := range []string{"fusermount3", "fusermount"} {
		if _, err := exec.LookPath(name); err == nil {
			env.fusermount = true
		}
	}
	env.devFuse = unix.Access("/dev/fuse", unix.R_OK|unix.W_OK)
	if b, err := os.ReadFile("/etc/fuse.conf"); err == nil {
		env.fuseConf = string(b)
	}
	return env
}

// userMountHint says what stands in the way of a mount by a user other
// than root, or "" if none of the usual causes is seen. Such a mount goes
// through fusermount3, a setuid helper that opens /dev/fuse as the
// calling user and writes its reason to stderr, where a mount in the
// background has no terminal to show it.
func userMountHint(env userMountEnv, allowOther bool) string {
	switch {
	case !env.fusermount:
		return "mounting as a user other than root needs fusermount3: install fuse3 (apt-get install fuse3, dnf install fuse3), or mount as root"
	case errors.Is(env.devFuse, iofs.ErrNotExist):
		return "there is no /dev/fuse: load the fuse module (as root: modprobe fuse), or give the container the device (docker run --device /dev/fuse)"
	case env.devFuse != nil:
		return fmt.Sprintf("fusermount3 opens /dev/fuse as uid %d, which may not read and write it: %v; its usual mode is 0666 (as root: chmod 0666 /dev/fuse), or mount as root", env.uid, env.devFuse)
	case allowOther && !userAllowOther(env.fuseConf):
		return "--allow-other (allow_other) needs a line user_allow_other in /etc/fuse.conf when not mounting as root"
	}
	return ""
}

// userAllowOther reports whether fuse.conf text enables user_allow_other
// as fusermount3 reads it: a line of its own, # starting a comment, and
// only lines that end in a newline (a last line without one is skipped).
func userAllowOther(conf string) bool {
	lines := strings.Split(conf, "\n")
	for _, line := range lines[:len(lines)-1] {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if strings.TrimSpace(line) == "user_allow_other" {
			return true
		}
	}
	return false
}
