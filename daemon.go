package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Background mode: the parent re-executes itself with daemonEnv set and
// the write end of a pipe as fd 3. The child starts a new session, mounts,
// and writes one line to the pipe:
//
//	ok                        the mount is live; the parent exits 0
//	error <code> <message>    nothing is mounted; the parent prints the
//	                          message and exits with code
//
// EOF without a line means the child died. The parent waits at most
// readyTimeout; then it kills the child and removes any mount it left, so
// `mount -a` or a boot script can never hang on us.
const (
	daemonEnv    = "FERRY_INTERNAL_DAEMON_FD"
	readyFD      = 3
	readyTimeout = 60 * time.Second
)

// readyPipe is the child's end of the readiness pipe.
type readyPipe struct {
	f *os.File
}

// daemonChild returns the readiness pipe when this process is the
// background child, and removes the marker so that nothing ferry starts
// inherits it.
func daemonChild() (*readyPipe, bool) {
	if os.Getenv(daemonEnv) != fmt.Sprint(readyFD) {
		return nil, false
	}
	os.Unsetenv(daemonEnv)
	// fd 3 was inherited without close-on-exec; fusermount must not keep
	// the pipe open after we report, or the parent would wait for EOF.
	syscall.CloseOnExec(readyFD)
	// We were started as /proc/self/exe, which ps and pgrep would show as
	// "exe".
	_ = os.WriteFile("/proc/self/comm", []byte("ferry"), 0)
	return &readyPipe{f: os.NewFile(readyFD, "ferry-ready")}, true
}

// report sends the outcome to the parent, once.
func (p *readyPipe) report(err error) {
	if p.f == nil {
		return
	}
	if err == nil {
		io.WriteString(p.f, "ok\n")
	} else {
		fmt.Fprintf(p.f, "error %d %s\n", exitCode(err), oneLine(err.Error()))
	}
	p.f.Close()
	p.f = nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// backgroundRequest starts a background child.
type backgroundRequest struct {
	// Exe and Args run the child: normally /proc/self/exe and the parent's
	// (translated) ferry arguments.
	Exe  string
	Args []string
	// Env is added to the parent's environment.
	Env []string
	// MountPoint is unmounted if the child is killed after mounting.
	MountPoint string
	// Stderr receives the child's stderr (the log file, so that a crash
	// is recorded); nil discards it.
	Stderr  *os.File
	Timeout time.Duration
}

// errNotReady is wrapped when the child did not report a live mount.
var errNotReady = errors.New("mount did not become ready")

// startBackground runs the child and waits until it reports. It returns
// nil once the mount is live; otherwise the child's error, with nothing
// left mounted.
func startBackground(ctx context.Context, req backgroundRequest) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()

	cmd := exec.Command(req.Exe, req.Args...)
	cmd.Args[0] = "ferry"
	cmd.Env = append(append(os.Environ(), req.Env...), fmt.Sprintf("%s=%d", daemonEnv, readyFD))
	cmd.ExtraFiles = []*os.File{w} // fd 3 in the child
	// The child parses the same arguments, so relative paths (mount
	// point, --cache-dir, --log-file, credential files) must mean what
	// they meant to the caller: it starts where we are and moves to /
	// once mounted (so as not to keep this directory busy).
	if wd, err := os.Getwd(); err == nil {
		cmd.Dir = wd
	} else {
		cmd.Dir = "/"
	}
	if req.Stderr != nil {
		cmd.Stderr = req.Stderr
	}
	// A new session: the child outlives our terminal and our process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}

	wasMounted := isMountPoint(req.MountPoint)
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("starting background process: %w", err)
	}
	w.Close() // only the child holds the write end now: its exit gives EOF

	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		lines <- strings.TrimSuffix(line, "\n")
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// giveUp kills the child and removes a mount it may have made.
	giveUp := func(why string) error {
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
		}
		if !wasMounted && isMountPoint(req.MountPoint) {
			_ = unmountRetry(req.MountPoint, 3, time.Second)
		}
		return fmt.Errorf("%w: %s", errNotReady, why)
	}

	timer := time.NewTimer(req.Timeout)
	defer timer.Stop()
	select {
	case line := <-lines:
		switch {
		case line == "ok":
			_ = cmd.Process.Release()
			return nil
		case strings.HasPrefix(line, "error "):
			// The child exits right after reporting; reap it so no zombie
			// outlives a long-running parent (tests, wrappers).
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
			}
			return parseChildError(strings.TrimPrefix(line, "error "))
		default:
			// EOF: the child died before reporting.
			var status error
			select {
			case status = <-exited:
			case <-time.After(5 * time.Second):
				return giveUp("background process closed its pipe without reporting")
			}
			return fmt.Errorf("%w: background process exited (%v) before mounting; run with --foreground (or --log-file) to see why", errNotReady, status)
		}
	case <-timer.C:
		return giveUp(fmt.Sprintf("no answer from the background process within %v; killed it", req.Timeout))
	case <-ctx.Done():
		return giveUp("interrupted; killed the background process")
	}
}

// childError is the error the background child reported, with the exit
// code it would have used itself.
type childError struct {
	code int
	msg  string
}

func (e *childError) Error() string { return e.msg }

func parseChildError(s string) *childError {
	code, msg, _ := strings.Cut(s, " ")
	n, err := strconv.Atoi(code)
	if err != nil || n <= 0 || n > 255 {
		return &childError{code: exitMountError, msg: s}
	}
	return &childError{code: n, msg: msg}
}

// isMountPoint reports whether dir is the mount point of some mount in
// our namespace.
func isMountPoint(dir string) bool {
	_, ok := mountType(dir)
	return ok
}

// mountEntry is one line of /proc/self/mountinfo, the parts we use.
type mountEntry struct {
	point  string // mount point, unescaped
	fstype string // "fuse.ferry", "tmpfs", ...
	dev    string // "major:minor", as stat(2) of the mount's root gives it
	owner  int    // a FUSE mount's user_id (who mounted it), else -1
}

// readMounts lists this process's mounts in mount order.
func readMounts() []mountEntry {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []mountEntry
	for _, line := range strings.Split(string(data), "\n") {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		e := mountEntry{point: unescapeMountinfo(fields[4]), dev: fields[2], owner: -1}
		for i, f := range fields {
			if f == "-" && i >= 6 && i+1 < len(fields) {
				e.fstype = fields[i+1]
				if i+3 < len(fields) {
					for _, o := range strings.Split(fields[i+3], ",") {
						if v, ok := strings.CutPrefix(o, "user_id="); ok {
							if uid, err := strconv.Atoi(v); err == nil {
								e.owner = uid
							}
						}
					}
				}
				break
			}
		}
		out = append(out, e)
	}
	return out
}

// topMount returns the topmost mount on dir, from /proc/self/mountinfo.
func topMount(dir string) (top mountEntry, mounted bool) {
	for _, m := range readMounts() {
		if m.point == dir {
			top, mounted = m, true
		}
	}
	return top, mounted
}

// mountType returns the file system type ("fuse.ferry", "tmpfs") of the
// topmost mount on dir.
func mountType(dir string) (fstype string, mounted bool) {
	m, ok := topMount(dir)
	return m.fstype, ok
}

// mountDev returns the device ("major:minor") of the topmost mount on dir.
func mountDev(dir string) string {
	m, _ := topMount(dir)
	return m.dev
}

// devOf is the device ("major:minor") of the file system holding path,
// as stat(2) sees it now.
func devOf(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)), nil
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + (c - '0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
