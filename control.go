package main

// The control socket: how `ferry invalidate` reaches the daemon serving a
// mount. setxattr cannot carry commands (the VFS refuses it on read-only
// mounts), and answering getxattr at all costs every `ls -l` a round trip
// per entry, so the daemon listens on a unix socket, mode 0600 in a 0700
// directory, at a path derived from the mount point (clients find the
// mount point in /proc/self/mountinfo); with --control-socket elsewhere
// it also links the derived path to it. A user with no directory for it
// gets an abstract socket, named by uid and mount point, whose two ends
// check each other's uid. One JSON request per connection, one JSON
// response.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"ferry/bucket"
	"ferry/filecache"
	"ferry/flags"
	"ferry/fs"
	"ferry/mountinfo"

	"golang.org/x/sys/unix"
)

// defaultControlDir holds the sockets of mounts without --control-socket.
const defaultControlDir = "/run/ferry"

const (
	// maxControlRequest bounds what the daemon reads of a request (a
	// path and a few fields).
	maxControlRequest = 64 << 10
	// maxControlConns bounds the requests served at once; more wait to
	// be accepted.
	maxControlConns = 16
)

// controlRequest is what a client sends.
type controlRequest struct {
	// Op is "invalidate" or "cached".
	Op string `json:"op"`
	// Path is an object path relative to the mount, "/" for all of it.
	Path string `json:"path"`
	// Data also drops the local disk cache of the files at or under Path.
	Data bool `json:"data,omitempty"`
	// Dev is the device ("major:minor") of the mount the client means: a
	// socket path names a mount point, and the mount there may since
	// have been detached and another mounted in its place.
	Dev string `json:"dev,omitempty"`
}

// controlResponse is what the daemon answers.
type controlResponse struct {
	Error string `json:"error,omitempty"`
	// For invalidate:
	Path          string `json:"path,omitempty"`
	CacheItems    int    `json:"cache_items"`
	KernelEntries int    `json:"kernel_entries"`
	DataEntries   int    `json:"data_entries"`
	DataBytes     int64  `json:"data_bytes"`
	// For cached: bytes of the file in the disk cache, and its size;
	// NoCache when the mount has no disk cache; OpenedAhead when the mount
	// opened the file ahead of a reader that has not come yet (warm reads
	// it: the bytes cached are that reader's, not held before).
	CachedBytes int64 `json:"cached_bytes"`
	Size        int64 `json:"size"`
	NoCache     bool  `json:"no_cache,omitempty"`
	OpenedAhead bool  `json:"opened_ahead,omitempty"`
}

// controlServer serves one mount's control socket.
type controlServer struct {
	// Dependencies
	log   *slog.Logger
	fs    *fs.Control
	store *filecache.Store // nil without a disk cache

	// Constant data
	path     string
	abstract bool        // path is an abstract socket: peers are checked
	identity bool        // uids are seen as the host sees them (for peer checks)
	overflow int         // the uid that unmapped uids show as otherwise
	created  os.FileInfo // the socket file as created, to remove only it
	link     string      // the default path, linked to path; "" if none
	ln       net.Listener

	dev atomic.Value // string: the mount's device, once mounted

	wg sync.WaitGroup
}

// defaultControlSocket names the socket of a mount point: a hash, because
// a mount point can be longer than a socket path may be (108 bytes).
func defaultControlSocket(mountPoint string) string {
	sum := sha256.Sum256([]byte(mountPoint))
	return filepath.Join(defaultControlDir, hex.EncodeToString(sum[:8])+".sock")
}

// abstractControlSocket names the socket of a mount by uid when there is
// no directory to put it in (not root, and no runtime directory: cron
// without a login session): an abstract unix socket, which has no file
// and goes with its daemon. Anyone may connect to such a name, or take
// it first, so the daemon answers only its own user and root, and the
// client talks only to a daemon running as uid (callControl).
func abstractControlSocket(uid int, mountPoint string) string {
	sum := sha256.Sum256([]byte(mountPoint))
	return fmt.Sprintf("@ferry/%d/%s", uid, hex.EncodeToString(sum[:8]))
}

// abstractOwner is the uid in an abstractControlSocket name; ok is false
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

// startControl listens on the mount's control socket: --control-socket,
// or /run/ferry/HASH.sock, or RUNTIME/ferry/HASH.sock (userRuntimeDir)
// when /run/ferry cannot be used, or else, for a user other than root,
// an abstract socket (abstractControlSocket). Without --control-socket a
// socket that cannot be created is logged and skipped (the mount works,
// only `ferry invalidate` and warm's questions do not); with it, it is
// an error.
func startControl(cfg *flags.Config, log *slog.Logger, store *filecache.Store) (*controlServer, error) {
	c := &controlServer{log: log, fs: fs.NewControl(), store: store}
	path, explicit := cfg.ControlSocket, true
	if path == "" {
		path, explicit = defaultControlSocket(cfg.MountPoint), false
	}
	// The default path is this mount point's: whatever is there (a link
	// left by a killed daemon, the socket of a daemon whose mount was
	// detached from here) is taken over. Requests carry the mount's
	// device, so a daemon that lost its socket path is never asked to act
	// for a mount that is not its own.
	ln, err := listenControl(path, !explicit, log)
	if rt := userRuntimeDir(); err != nil && !explicit && rt != "" {
		// Not root: /run/ferry is not ours to create; the user's runtime
		// directory is the per-user equivalent.
		path = filepath.Join(rt, "ferry", filepath.Base(path))
		ln, err = listenControl(path, true, log)
	}
	if uid := os.Getuid(); err != nil && !explicit && uid != 0 {
		// No directory of its own for the socket either (cron without a
		// login session). An abstract name taken by another process
		// (an earlier ferry on this mount point, detached but still
		// serving) is not taken over: there is no file to replace.
		name := abstractControlSocket(uid, cfg.MountPoint)
		if aln, aerr := net.Listen("unix", name); aerr == nil {
			path, ln, err = name, aln, nil
			c.abstract, c.identity, c.overflow = true, identityUIDMap(), overflowUID()
		} else {
			err = fmt.Errorf("%v; abstract socket: %v", err, aerr)
		}
	}
	if err != nil {
		if explicit {
			return nil, &flags.OptionError{Option: "control-socket", Err: err}
		}
		log.Warn("no control socket; ferry invalidate will not reach this mount (set --control-socket)", "err", err)
		return c, nil
	}
	c.path, c.ln = path, ln
	if !c.abstract {
		c.created, _ = os.Lstat(path)
	}
	if def := defaultControlSocket(cfg.MountPoint); explicit && def != path {
		// Clients look for the socket at the derived path.
		if os.MkdirAll(filepath.Dir(def), 0o700) == nil {
			if fi, err := os.Lstat(def); err == nil && fi.Mode()&(os.ModeSymlink|os.ModeSocket) != 0 {
				_ = os.Remove(def) // left by an earlier daemon on this mount point
			}
			if err := os.Symlink(path, def); err == nil {
				c.link = def
			} else {
				log.Warn("control socket not linked at its default path; ferry warm --check and invalidate will not find it", "path", def, "err", err)
			}
		}
	}
	c.wg.Add(1)
	go c.serve()
	return c, nil
}

// listenControl creates the socket, replacing a stale one left by a
// daemon that died. One that still answers is replaced only with
// takeOver, as is a symlink there (os.Remove never follows it).
func listenControl(path string, takeOver bool, log *slog.Logger) (net.Listener, error) {
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

// socketPath is the socket to advertise, "" if there is none.
func (c *controlServer) socketPath() string { return c.path }

// Close stops listening and removes the socket.
func (c *controlServer) Close() {
	if c.ln != nil {
		c.ln.Close()
		if sameFile(c.path, c.created) {
			_ = os.Remove(c.path)
		}
	}
	if c.link != "" {
		if target, err := os.Readlink(c.link); err == nil && target == c.path {
			_ = os.Remove(c.link)
		}
	}
	c.wg.Wait()
}

func (c *controlServer) serve() {
	defer c.wg.Done()
	slots := make(chan struct{}, maxControlConns)
	var backoff time.Duration
	for {
		conn, err := c.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of descriptors (EMFILE) or a connection gone before it
			// was accepted: wait, then serve on.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			c.log.Warn("control socket: accept failed; retrying", "err", err, "in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		// A socket file is closed to others by its mode; an abstract one
		// is not. A stranger is dropped at once, before anything is read
		// or held for it.
		if c.abstract && !c.peerAllowed(conn) {
			conn.Close()
			continue
		}
		slots <- struct{}{}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer func() { <-slots }()
			defer conn.Close()
			c.handle(conn)
		}()
	}
}

// peerAllowed reports whether the process at the other end of conn runs
// as this daemon's user or as root. In a user namespace, every uid it
// does not map shows as the overflow uid (65534): that uid is refused
// there, as it may be anyone (a daemon running as it there answers only
// root).
func (c *controlServer) peerAllowed(conn net.Conn) bool {
	uid, err := peerUID(conn)
	if err != nil {
		return false
	}
	return uidAllowed(uid, os.Getuid(), c.identity, c.overflow)
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

func (c *controlServer) handle(conn net.Conn) {
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	var req controlRequest
	var resp controlResponse
	if err := json.NewDecoder(io.LimitReader(conn, maxControlRequest)).Decode(&req); err != nil {
		resp.Error = "bad request: " + err.Error()
	} else {
		resp = c.do(context.Background(), &req)
	}
	_ = json.NewEncoder(conn).Encode(&resp)
}

// mounted records the device of the mount this socket serves.
func (c *controlServer) mounted(mountPoint string) {
	if m, _ := mountinfo.Top(mountPoint); m.Dev != "" {
		c.dev.Store(m.Dev)
	}
}

func (c *controlServer) do(ctx context.Context, req *controlRequest) controlResponse {
	if dev, _ := c.dev.Load().(string); dev != "" && req.Dev != "" && req.Dev != dev {
		return controlResponse{Error: fmt.Sprintf("this control socket serves another mount (device %s, not %s): the ferry mounted there now has none; restart it", dev, req.Dev)}
	}
	switch req.Op {
	case "invalidate":
	case "cached":
		cf, err := c.fs.Cached(ctx, req.Path)
		if err != nil {
			return controlResponse{Error: err.Error()}
		}
		return controlResponse{Path: req.Path, CachedBytes: cf.Bytes, Size: cf.Size, NoCache: cf.NoCache, OpenedAhead: cf.OpenedAhead}
	default:
		return controlResponse{Error: fmt.Sprintf("unknown op %q", req.Op)}
	}
	res, err := c.fs.Invalidate(ctx, req.Path)
	resp := controlResponse{Path: "/" + res.Path, CacheItems: res.CacheItems, KernelEntries: res.KernelEntries}
	if err != nil {
		resp.Error = err.Error()
		return resp
	}
	if req.Data {
		if c.store == nil {
			resp.Error = "the mount has no disk cache (--cache-dir): metadata invalidated, no data to drop"
			return resp
		}
		p := res.Path
		resp.DataEntries, resp.DataBytes = c.store.Drop(func(name string) bool {
			return p == "" || name == p || strings.HasPrefix(name, p+"/")
		})
	}
	c.log.Info("control: invalidate", "path", resp.Path, "data", req.Data,
		"cache_items", resp.CacheItems, "kernel_entries", resp.KernelEntries, "data_entries", resp.DataEntries)
	return resp
}

// cachedBytesOf is fs.Config.CachedBytes for store, nil without one.
func cachedBytesOf(store *filecache.Store) func(bucket.Object) int64 {
	if store == nil {
		return nil
	}
	return func(obj bucket.Object) int64 { return store.CachedBytes(&obj) }
}

// callControl sends one request to the socket at path.
func callControl(ctx context.Context, path string, req *controlRequest) (*controlResponse, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	for wait := 10 * time.Millisecond; errors.Is(err, syscall.EAGAIN) && wait < time.Second && ctx.Err() == nil; wait *= 2 {
		// The daemon's queue of connections is full (a burst of clients,
		// or someone flooding an abstract socket): try again shortly.
		time.Sleep(wait)
		conn, err = d.DialContext(ctx, "unix", path)
	}
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if want, ok := abstractOwner(path); ok {
		// Anyone can hold an abstract name: only the mount's owner is asked.
		got, err := peerUID(conn)
		if err != nil {
			return nil, fmt.Errorf("control socket %s: cannot tell who holds it: %w", path, err)
		}
		if got != want {
			return nil, fmt.Errorf("control socket %s is held by uid %d, not by the mount's owner (uid %d): not asked", path, got, want)
		}
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	var resp controlResponse
	if err := json.NewDecoder(conn).Decode(&resp); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if resp.Error != "" {
		return &resp, errors.New(resp.Error)
	}
	return &resp, nil
}
