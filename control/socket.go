package control

// Where control sockets are, and who may use them.

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// defaultDir holds the sockets of mounts without --control-socket.
const defaultDir = "/run/ferry"

// defaultSocket names the socket of a mount point: a hash, because
// a mount point can be longer than a socket path may be (108 bytes).
func defaultSocket(mountPoint string) string {
	sum := sha256.Sum256([]byte(mountPoint))
	return filepath.Join(defaultDir, hex.EncodeToString(sum[:8])+".sock")
}

// abstractSocket names the socket of a mount by uid when there is
// no directory to put it in (not root, and no runtime directory: cron
// without a login session): an abstract unix socket, which has no file
// and goes with its daemon. Anyone may connect to such a name, or take
// it first, so the daemon answers only its own user and root, and the
// client talks only to a daemon running as uid (call).
func abstractSocket(uid int, mountPoint string) string {
	sum := sha256.Sum256([]byte(mountPoint))
	return fmt.Sprintf("@ferry/%d/%s", uid, hex.EncodeToString(sum[:8]))
}

// abstractOwner is the uid in an abstractSocket name; ok is false
// for a path.
func abstractOwner(name string) (uid int, ok bool) {
	rest, found := strings.CutPrefix(name, "@ferry/")
	if !found {
		return 0, false
	}
	digits, _, _ := strings.Cut(rest, "/")
	uid, err := strconv.Atoi(digits)
	return uid, err == nil
}

// userRuntimeDir is the directory for the user's sockets: $XDG_RUNTIME_DIR,
// else /run/user/UID if it is the user's own and private (a login made
// it, and the environment does not say so, as under sudo -u or su); ""
// if neither.
func userRuntimeDir() string { return runtimeDirUnder("/run/user") }

// runtimeDirUnder is userRuntimeDir with base for /run/user.
func runtimeDirUnder(base string) string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return d
	}
	d := filepath.Join(base, strconv.Itoa(os.Getuid()))
	var st syscall.Stat_t
	if err := syscall.Lstat(d, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR ||
		int(st.Uid) != os.Getuid() || st.Mode&0o077 != 0 {
		return ""
	}
	return d
}

// listenSocket creates the socket, replacing a stale one left by a
// daemon that died. One that still answers is replaced only with
// takeOver, as is a symlink there (os.Remove never follows it).
func listenSocket(path string, takeOver bool, log *slog.Logger) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		switch {
		case fi.Mode()&os.ModeSymlink != 0 && takeOver:
		case fi.Mode()&os.ModeSocket == 0:
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		default:
			if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
				conn.Close()
				if !takeOver {
					return nil, fmt.Errorf("%s is in use by another ferry", path)
				}
				log.Info("control socket taken over from an earlier ferry on this mount point (detached, or stacked under this mount)", "path", path)
			}
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err // (gone meanwhile: its daemon removed it)
		}
	}
	// The socket is created with the umask applied; 0600 from the start
	// leaves no window in which others could connect.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	// Close removes the socket only while it is still ours: a later
	// ferry on this mount point may have taken the path over.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	return ln, nil
}

// sameFile reports whether path is (still) the file fi was.
func sameFile(path string, fi os.FileInfo) bool {
	now, err := os.Lstat(path)
	return err == nil && fi != nil && os.SameFile(fi, now)
}

// peerUID is the uid of the process at the other end of a unix socket.
func peerUID(conn net.Conn) (int, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return 0, fmt.Errorf("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return int(cred.Uid), nil
}

// uidAllowed is peerAllowed's rule for a peer uid, the daemon's own, and
// whether uids are seen as they are (no user namespace).
func uidAllowed(peer, self int, identity bool, overflow int) bool {
	if !identity && peer == overflow {
		return false
	}
	return peer == 0 || peer == self
}

// identityUIDMap reports whether this process sees uids as the host does
// (the initial user namespace).
func identityUIDMap() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	return err == nil && strings.Join(strings.Fields(string(b)), " ") == "0 0 4294967295"
}

// overflowUID is the uid that unmapped uids show as in a user namespace.
func overflowUID() int {
	b, err := os.ReadFile("/proc/sys/kernel/overflowuid")
	if err != nil {
		return 65534
	}
	uid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 65534
	}
	return uid
}

// listening reports whether an abstract unix socket of this name listens
// in this network namespace, as /proc/net/unix lists them (without
// connecting to it).
func listening(abstract string) bool {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Num RefCount Protocol Flags Type St Inode Path: a listener has
		// flag __SO_ACCEPTCON (00010000), type stream (0001), and state
		// unconnected (01).
		fields := strings.Fields(sc.Text())
		if len(fields) == 8 && fields[7] == abstract && fields[3] == "00010000" && fields[4] == "0001" && fields[5] == "01" {
			return true
		}
	}
	return false
}
