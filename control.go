package main

// The control socket: how `ferry invalidate` reaches the daemon serving a
// mount. setxattr cannot carry commands (the VFS refuses it on read-only
// mounts), and answering getxattr at all costs every `ls -l` a round trip
// per entry, so the daemon listens on a unix socket, mode 0600 in a 0700
// directory, at a path derived from the mount point (clients find the
// mount point in /proc/self/mountinfo); with --control-socket elsewhere
// it also links the derived path to it. One JSON request per connection,
// one JSON response.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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
)

// defaultControlDir holds the sockets of mounts without --control-socket.
const defaultControlDir = "/run/ferry"

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
	path    string
	created os.FileInfo // the socket file as created, to remove only it
	link    string      // the default path, linked to path; "" if none
	ln      net.Listener

	dev atomic.Value // string: the mount's device, once mounted

	wg sync.WaitGroup
}

// defaultControlSocket names the socket of a mount point: a hash, because
// a mount point can be longer than a socket path may be (108 bytes).
func defaultControlSocket(mountPoint string) string {
	sum := sha256.Sum256([]byte(mountPoint))
	return filepath.Join(defaultControlDir, hex.EncodeToString(sum[:8])+".sock")
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
// when /run/ferry cannot be used. Without --control-socket a socket that
// cannot be created is logged and skipped (the mount works, only
// `ferry invalidate` does not); with it, it is an error.
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
	if err != nil {
		if explicit {
			return nil, &flags.OptionError{Option: "control-socket", Err: err}
		}
		log.Warn("no control socket; ferry invalidate will not reach this mount (set --control-socket)", "err", err)
		return c, nil
	}
	c.path, c.ln = path, ln
	c.created, _ = os.Lstat(path)
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
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return // closed
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer conn.Close()
			c.handle(conn)
		}()
	}
}

func (c *controlServer) handle(conn net.Conn) {
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	var req controlRequest
	var resp controlResponse
	if err := json.NewDecoder(conn).Decode(&req); err != nil {
		resp.Error = "bad request: " + err.Error()
	} else {
		resp = c.do(context.Background(), &req)
	}
	_ = json.NewEncoder(conn).Encode(&resp)
}

// mounted records the device of the mount this socket serves.
func (c *controlServer) mounted(mountPoint string) {
	if dev := mountDev(mountPoint); dev != "" {
		c.dev.Store(dev)
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
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
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
