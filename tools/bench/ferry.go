package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// buildFerry builds the ferry binary from the module root into dir.
func buildFerry(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module root: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("building ferry: run the benchmark from inside the ferry module (or pass --ferry-bin)")
	}
	bin := filepath.Join(dir, "ferry")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Dir(gomod)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ferry: %w\n%s", err, b)
	}
	return bin, nil
}

// Ferry knows how to start ferry on the emulated store.
type Ferry struct {
	Bin    string
	Source string
	// Args go before SOURCE and MNT: the store's flags, then --ferry-args.
	Args   []string
	Env    []string
	LogDir string
}

// Mount is one running ferry process serving one mount point.
type Mount struct {
	Dir string
	Pid int
	Log string
	// Metrics is ferry's /metrics URL, when the caller gave it a
	// --metrics-addr.
	Metrics string

	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error // set before done is closed
}

// Mount starts `ferry --foreground ARGS --cache-dir CACHE SOURCE DIR` and
// returns once the kernel lists the mount. On any failure nothing is left
// mounted or running.
func (f *Ferry) Mount(ctx context.Context, dir, cacheDir string, n int) (*Mount, error) {
	args := []string{"--foreground"}
	args = append(args, f.Args...)
	if cacheDir != "" {
		args = append(args, "--cache-dir", cacheDir)
	}
	args = append(args, f.Source, dir)
	logPath := filepath.Join(f.LogDir, fmt.Sprintf("ferry-%02d.log", n))
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "# %s %s\n", f.Bin, shellJoin(args))
	cmd := exec.Command(f.Bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), f.Env...)
	// ferry must not outlive the benchmark if the benchmark is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting ferry: %w", err)
	}
	m := &Mount{Dir: dir, Pid: cmd.Process.Pid, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		m.waitErr = cmd.Wait()
		close(m.done)
	}()
	if err := m.waitMounted(ctx, 60*time.Second); err != nil {
		_ = m.Unmount()
		return nil, err
	}
	// A reader blocked in a FUSE read does not see ctx; if ferry hangs and
	// the run is interrupted, detach the mount and kill ferry so the
	// blocked syscalls return (ENOTCONN) and the deferred cleanup can run.
	go func() {
		select {
		case <-m.done:
		case <-ctx.Done():
			select {
			case <-m.done:
			case <-time.After(abortGrace):
				m.abort()
			}
		}
	}()
	return m, nil
}

// abortGrace is how long an interrupted run waits for its readers to stop
// before it pulls the mount from under them.
const abortGrace = 10 * time.Second

// abort detaches the mount and kills ferry.
func (m *Mount) abort() {
	_ = exec.Command("umount", "-l", m.Dir).Run()
	_ = syscall.Kill(m.Pid, syscall.SIGTERM)
	if !m.exited(5 * time.Second) {
		_ = syscall.Kill(-m.Pid, syscall.SIGKILL)
	}
}

func (m *Mount) waitMounted(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		info, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		if fstype, ok := mountedAt(info, m.Dir); ok && strings.HasPrefix(fstype, "fuse") {
			return nil
		}
		select {
		case <-m.done:
			return fmt.Errorf("ferry exited before mounting (%v):\n%s", m.waitErr, tailFile(m.Log, 3000))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ferry did not mount %s within %v:\n%s", m.Dir, timeout, tailFile(m.Log, 3000))
		}
	}
}

// Unmount unmounts with umount(8) and waits for ferry to exit. If the
// mount is busy or ferry hangs it escalates: lazy unmount, SIGTERM,
// SIGKILL. Safe to call more than once.
func (m *Mount) Unmount() error {
	select {
	case <-m.done:
		m.lazyUnmountIfMounted()
		return m.exitErr()
	default:
	}
	var umountErr error
	for attempt := range 5 {
		out, err := exec.Command("umount", m.Dir).CombinedOutput()
		if err == nil {
			umountErr = nil
			break
		}
		umountErr = fmt.Errorf("umount %s: %v: %s", m.Dir, err, strings.TrimSpace(string(out)))
		if m.exited(time.Duration(attempt+1) * 200 * time.Millisecond) {
			break
		}
	}
	if m.exited(20 * time.Second) {
		m.lazyUnmountIfMounted()
		return errors.Join(umountErr, m.exitErr())
	}
	// ferry did not exit by itself: that is a bug worth reporting, but the
	// machine must still be left clean.
	_ = exec.Command("umount", "-l", m.Dir).Run()
	_ = syscall.Kill(m.Pid, syscall.SIGTERM)
	if !m.exited(10 * time.Second) {
		_ = syscall.Kill(-m.Pid, syscall.SIGKILL)
		<-m.done
	}
	m.lazyUnmountIfMounted()
	return errors.Join(umountErr, fmt.Errorf("ferry (pid %d) did not exit within 20 s of umount; killed", m.Pid))
}

func (m *Mount) exited(d time.Duration) bool {
	select {
	case <-m.done:
		return true
	case <-time.After(d):
		return false
	}
}

// exitErr is ferry's exit status: a clean unmount exits 0.
func (m *Mount) exitErr() error {
	if m.waitErr != nil {
		return fmt.Errorf("ferry (pid %d) exited: %v\n%s", m.Pid, m.waitErr, tailFile(m.Log, 2000))
	}
	return nil
}

// lazyUnmountIfMounted detaches a mount whose server died, so the mount
// point is not left as "transport endpoint is not connected".
func (m *Mount) lazyUnmountIfMounted() {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	if _, ok := mountedAt(info, m.Dir); ok {
		_ = exec.Command("umount", "-l", m.Dir).Run()
	}
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
