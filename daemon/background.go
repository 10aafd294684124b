package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"ferry/flags"
	"ferry/mountinfo"
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
	f        *os.File
	exitCode func(error) int // the status an error stands for
}

// backgroundChild returns the readiness pipe when this process is the
// background child, and removes the marker so that nothing ferry starts
// inherits it.
func backgroundChild(exitCode func(error) int) (*readyPipe, bool) {
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
	return &readyPipe{f: os.NewFile(readyFD, "ferry-ready"), exitCode: exitCode}, true
}

// report sends the outcome to the parent, once.
func (p *readyPipe) report(err error) {
	if p.f == nil {
		return
	}
	if err == nil {
		io.WriteString(p.f, "ok\n")
	} else {
		fmt.Fprintf(p.f, "error %d %s\n", p.exitCode(err), oneLine(err.Error()))
	}
	p.f.Close()
	p.f = nil
}

// serveChild is the background child: it reports the mount's outcome to
// the parent, then serves until unmounted. An error it returns has been
// reported and logged already (ReportedError): the parent prints it.
func serveChild(cfg *flags.Config, mount Mounter, pipe *readyPipe) error {
	// No terminal to hang up: a SIGHUP before serving is ignored, and
	// then reopens the log (sighup).
	signal.Ignore(syscall.SIGHUP)
	logger, out, err := newLogger(cfg, true, nil)
	if err != nil {
		pipe.report(err)
		return ReportedError{err}
	}
	defer out.Close()
	if err := checkMountPoint(cfg.MountPoint, cfg.NonEmpty, true); err != nil {
		pipe.report(err)
		logger.Error("exiting", "err", err)
		return ReportedError{err}
	}
	err = serveLogged(cfg, logger, out, mount, func() {
		logger.Info("mounted", "source", cfg.Source, "mountpoint", cfg.MountPoint)
		// Started in the caller's directory (see startBackground); every
		// path has been used by now.
		if err := os.Chdir("/"); err != nil {
			logger.Warn("cannot leave the starting directory", "err", err)
		}
		pipe.report(nil)
	})
	pipe.report(err) // no-op once ready was reported
	if err != nil {
		logger.Error("exiting", "err", err)
		return ReportedError{err}
	}
	return nil
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

	wasMounted := mountinfo.IsMountPoint(req.MountPoint)
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
		if !wasMounted && mountinfo.IsMountPoint(req.MountPoint) {
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
