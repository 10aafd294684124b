package control

// The client's side: finding the mount of a path and its socket, and
// asking it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	iofs "io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"ferry/mountinfo"
)

// call sends one request to the socket at path.
func call(ctx context.Context, path string, req *request) (*response, error) {
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
	var resp response
	if err := json.NewDecoder(conn).Decode(&resp); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if resp.Error != "" {
		return &resp, errors.New(resp.Error)
	}
	return &resp, nil
}

// locate finds the control socket of the mount holding p and p's object
// path. p itself may not exist (an object added to the store since it was
// last listed).
func locate(p string) (socket, objPath, dev string, err error) {
	mp, obj, err := ferryMount(p)
	if err != nil {
		return "", "", "", err
	}
	if dev, err = mountinfo.DeviceOf(mp); err != nil {
		return "", "", "", err
	}
	socket, err = socketOf(mp)
	return socket, obj, dev, err
}

// errNotFerry says a path is not inside a ferry mount.
var errNotFerry = errors.New("not on a ferry mount")

// ferryMount finds the ferry mount that holds p, and p's object path in it
// ("/" for the mount root). p need not exist (an object added to the store
// since the last listing): its nearest existing ancestor is resolved,
// symlinks followed, and the rest appended.
func ferryMount(p string) (mountPoint, objPath string, err error) {
	dir, err := filepath.Abs(p)
	if err != nil {
		return "", "", err
	}
	var rest []string
	for {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			dir = real
			break
		}
		if !errors.Is(err, iofs.ErrNotExist) {
			return "", "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", "", errNotFerry
		}
		rest = append([]string{filepath.Base(dir)}, rest...)
		dir = parent
	}
	full := filepath.Join(append([]string{dir}, rest...)...)
	// The deepest mount containing full decides (the last one listed on
	// the same point is on top): a ferry mount with another file system
	// mounted inside it does not own that subtree.
	m, ok := mountinfo.Read().Holding(full)
	if !ok || m.FSType != mountinfo.FerryType {
		return "", "", errNotFerry
	}
	return m.Point, "/" + strings.TrimPrefix(strings.TrimPrefix(full, m.Point), "/"), nil
}

// socketOf finds the control socket of the ferry mounted on
// mountPoint: where Listen puts it by default (a name derived from
// the mount point, also linked there when --control-socket put it
// elsewhere), or, for a mount by a user other than root, the abstract
// socket it falls back to.
func socketOf(mountPoint string) (string, error) {
	def := defaultSocket(mountPoint)
	candidates := []string{def}
	if rt := userRuntimeDir(); rt != "" {
		candidates = append(candidates, filepath.Join(rt, "ferry", filepath.Base(def)))
	}
	m, _ := mountinfo.Top(mountPoint)
	var denied error
	for _, c := range candidates {
		_, err := os.Stat(c)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, iofs.ErrPermission) && denied == nil {
			denied = err // another place may still be ours
		}
	}
	hint := "see the daemon's log"
	if me := os.Getuid(); m.Owner > 0 {
		if me != m.Owner && me != 0 {
			return "", fmt.Errorf("the control socket of the ferry mount on %s is only for uid %d, who mounted it, and root", mountPoint, m.Owner)
		}
		if me == 0 {
			hint = fmt.Sprintf("a socket in uid %d's XDG_RUNTIME_DIR is found only by that user; or see the daemon's log", m.Owner)
		}
		// A user's daemon, which cannot use root's /run/ferry (denied
		// there means nothing): its abstract socket, if it has one.
		abstract := abstractSocket(m.Owner, mountPoint)
		if listening(abstract) {
			return abstract, nil
		}
		candidates = append(candidates, abstract)
		denied = nil
	}
	if denied != nil {
		return "", fmt.Errorf("the control socket of the ferry mount on %s: %w (it is only for the user running ferry, or root)", mountPoint, denied)
	}
	return "", fmt.Errorf("no control socket for the ferry mount on %s (looked for %s; %s)", mountPoint, strings.Join(candidates, ", "), hint)
}

// cachedBytes is how many bytes of the file at path ferry's disk cache
// holds; ok is false if the mount has no disk cache. It asks the daemon
// through its control socket and fetches nothing.
func cachedBytes(path string) (n int64, ok bool, err error) {
	resp, err := askCached(path)
	if err != nil || resp.NoCache {
		return 0, false, err
	}
	return resp.CachedBytes, true, nil
}

// askCached asks the daemon of the mount holding path what its disk cache
// holds of the file.
func askCached(path string) (*response, error) {
	socket, obj, dev, err := locate(path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return call(ctx, socket, &request{Op: "cached", Path: obj, Dev: dev})
}
