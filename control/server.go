package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ferry/filecache"
	"ferry/flags"
	"ferry/fs"
	"ferry/mountinfo"
)

// FS is what the server asks of the mounted file system.
type FS interface {
	// Invalidate drops the file system's and the kernel's cached
	// metadata of the object path p and all below it.
	Invalidate(ctx context.Context, p string) (fs.InvalidateResult, error)
	// Cached says what the disk cache holds of the file at object path p.
	Cached(ctx context.Context, p string) (fs.CachedFile, error)
}

// Cache is what the server asks of the disk cache.
type Cache interface {
	// Drop removes the cached data of every object whose name match
	// accepts, and says how many entries and bytes it removed.
	Drop(match func(name string) bool) (entries int, bytes int64)
}

var (
	_ FS    = (*fs.Control)(nil)
	_ Cache = (*filecache.Store)(nil)
)

// Config is what a control socket server needs.
type Config struct {
	// MountPoint is the mount's directory, from which the default socket
	// path is derived.
	MountPoint string
	// Socket is --control-socket: "" for the default path.
	Socket string
	// FS is the mounted file system (an fs.Control).
	FS FS
	// Cache is the disk cache, nil (the interface) without one.
	Cache Cache
	// Metrics are the mount's metrics, which the stats op reads;
	// ConstLabels are the labels every series has (which mount), left
	// out of the answer.
	Metrics     prometheus.Gatherer
	ConstLabels prometheus.Labels
	Logger      *slog.Logger
}

// Server serves one mount's control socket.
type Server struct {
	// Dependencies
	log      *slog.Logger
	fs       FS
	cache    Cache               // nil without a disk cache
	metrics  prometheus.Gatherer // nil: no stats
	constant map[string]bool     // label names every series has

	// Constant data
	path     string
	abstract bool        // path is an abstract socket: peers are checked
	identity bool        // uids are seen as the host sees them (for peer checks)
	overflow int         // the uid that unmapped uids show as otherwise
	created  os.FileInfo // the socket file as created, to remove only it
	link     string      // the default path, linked to path; "" if none
	ln       net.Listener

	// Mutable state
	dev atomic.Value // string: the mount's device, once mounted

	wg sync.WaitGroup
}

// Listen listens on the mount's control socket: --control-socket, or
// /run/ferry/HASH.sock, or RUNTIME/ferry/HASH.sock (userRuntimeDir) when
// /run/ferry cannot be used, or else, for a user other than root, an
// abstract socket (abstractSocket). Without --control-socket a socket
// that cannot be created is logged and skipped (the mount works, only
// `ferry invalidate` and warm's questions do not); with it, it is an
// error. Call Mounted once the file system is mounted, and Close when it
// has ended.
func Listen(cfg Config) (*Server, error) {
	log := cfg.Logger
	c := &Server{log: log, fs: cfg.FS, cache: cfg.Cache, metrics: cfg.Metrics, constant: map[string]bool{}}
	for k := range cfg.ConstLabels {
		c.constant[k] = true
	}
	path, explicit := cfg.Socket, true
	if path == "" {
		path, explicit = defaultSocket(cfg.MountPoint), false
	}
	// The default path is this mount point's: whatever is there (a link
	// left by a killed daemon, the socket of a daemon whose mount was
	// detached from here) is taken over. Requests carry the mount's
	// device, so a daemon that lost its socket path is never asked to act
	// for a mount that is not its own.
	ln, err := listenSocket(path, !explicit, log)
	if rt := userRuntimeDir(); err != nil && !explicit && rt != "" {
		// Not root: /run/ferry is not ours to create; the user's runtime
		// directory is the per-user equivalent.
		path = filepath.Join(rt, "ferry", filepath.Base(path))
		ln, err = listenSocket(path, true, log)
	}
	if uid := os.Getuid(); err != nil && !explicit && uid != 0 {
		// No directory of its own for the socket either (cron without a
		// login session). An abstract name taken by another process
		// (an earlier ferry on this mount point, detached but still
		// serving) is not taken over: there is no file to replace.
		name := abstractSocket(uid, cfg.MountPoint)
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
	if def := defaultSocket(cfg.MountPoint); explicit && def != path {
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

// Path is the socket clients reach, "" if there is none.
func (c *Server) Path() string { return c.path }

// Close stops listening and removes the socket.
func (c *Server) Close() {
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

// Mounted records the device of the mount this socket serves, once it is
// mounted on mountPoint: requests for another mount there are refused.
func (c *Server) Mounted(mountPoint string) {
	if m, _ := mountinfo.Top(mountPoint); m.Dev != "" {
		c.dev.Store(m.Dev)
	}
}

func (c *Server) serve() {
	defer c.wg.Done()
	slots := make(chan struct{}, maxConns)
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
func (c *Server) peerAllowed(conn net.Conn) bool {
	uid, err := peerUID(conn)
	if err != nil {
		return false
	}
	return uidAllowed(uid, os.Getuid(), c.identity, c.overflow)
}

func (c *Server) handle(conn net.Conn) {
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	var req request
	var resp response
	if err := json.NewDecoder(io.LimitReader(conn, maxRequest)).Decode(&req); err != nil {
		resp.Error = "bad request: " + err.Error()
	} else {
		resp = c.do(context.Background(), &req)
	}
	_ = json.NewEncoder(conn).Encode(&resp)
}

func (c *Server) do(ctx context.Context, req *request) response {
	if dev, _ := c.dev.Load().(string); dev != "" && req.Dev != "" && req.Dev != dev {
		return response{Error: fmt.Sprintf("this control socket serves another mount (device %s, not %s): the ferry mounted there now has none; restart it", dev, req.Dev)}
	}
	switch req.Op {
	case "invalidate":
	case "stats":
		if c.metrics == nil {
			return response{Error: "this mount keeps no metrics"}
		}
		series, err := snapshot(c.metrics, c.constant)
		if err != nil {
			return response{Error: err.Error()}
		}
		return response{Series: series, At: time.Now().UnixNano()}
	case "cached":
		cf, err := c.fs.Cached(ctx, req.Path)
		if err != nil {
			return response{Error: err.Error()}
		}
		return response{Path: req.Path, CachedBytes: cf.Bytes, Size: cf.Size, NoCache: cf.NoCache, OpenedAhead: cf.OpenedAhead}
	default:
		return response{Error: fmt.Sprintf("unknown op %q", req.Op)}
	}
	res, err := c.fs.Invalidate(ctx, req.Path)
	resp := response{Path: "/" + res.Path, CacheItems: res.CacheItems, KernelEntries: res.KernelEntries}
	if err != nil {
		resp.Error = err.Error()
		return resp
	}
	if req.Data {
		if c.cache == nil {
			resp.Error = "the mount has no disk cache (--cache-dir): metadata invalidated, no data to drop"
			return resp
		}
		p := res.Path
		resp.DataEntries, resp.DataBytes = c.cache.Drop(func(name string) bool {
			return p == "" || name == p || strings.HasPrefix(name, p+"/")
		})
	}
	c.log.Info("control: invalidate", "path", resp.Path, "data", req.Data,
		"cache_items", resp.CacheItems, "kernel_entries", resp.KernelEntries, "data_entries", resp.DataEntries)
	return resp
}
