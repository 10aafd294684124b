package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// openPty opens a pseudo-terminal: the master, and the terminal itself.
func openPty(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	require.NoError(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	return m, s
}

// TestForegroundSIGHUP: a SIGHUP sent on purpose (logrotate's
// postrotate) reopens --log-file and the mount serves on; the hang-up of
// the foreground ferry's terminal (an ssh session that closed) unmounts
// it and it exits, leaving no dead mount.
func TestForegroundSIGHUP(t *testing.T) {
	if signal.Ignored(syscall.SIGHUP) {
		// Under nohup ferry would inherit the ignored SIGHUP. A signal
		// caught here is reset to its default in the child.
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGHUP)
		defer signal.Stop(c)
	}
	s := newStore(t, "file")
	s.put(t, "f", []byte("x"))
	dir := t.TempDir()
	logFile := filepath.Join(t.TempDir(), "ferry.log")
	master, tty := openPty(t)
	defer master.Close()
	cmd := exec.Command(ferryBin, "--foreground", "--log-file", logFile, s.url, dir)
	// ferry leads a session whose controlling terminal is the pty, as a
	// login shell's command does.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	tty.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	m := &mounted{dir: dir, pid: cmd.Process.Pid, log: logFile}
	t.Cleanup(func() { m.unmount(t) })
	read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }
	require.Eventually(t, func() bool { return strings.Contains(read(logFile), "msg=mounted") }, 20*time.Second, 20*time.Millisecond, "never mounted")

	// logrotate: move the file, then SIGHUP.
	require.NoError(t, os.Rename(logFile, logFile+".1"))
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(read(logFile), "reopened the log file") }, 10*time.Second, 20*time.Millisecond,
		"no new log file after SIGHUP; old one:\n%s", read(logFile+".1"))
	got, err := os.ReadFile(filepath.Join(dir, "f"))
	require.NoError(t, err, "the mount must serve on after SIGHUP")
	assert.Equal(t, "x", string(got))
	assert.True(t, isMounted(dir))
	fi, err := os.Stat(logFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the log file holds object names")

	// The terminal goes away: closing the master hangs it up.
	require.NoError(t, master.Close())
	select {
	case err := <-exited:
		require.NoError(t, err, "log:\n%s", read(logFile))
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after the terminal hung up; log:\n%s", read(logFile))
	}
	assert.False(t, isMounted(dir), "the hang-up left the mount behind")
	assert.Contains(t, read(logFile), "the terminal hung up")
}

// TestBackgroundSIGHUPReopensLog: the background daemon (no terminal)
// reopens its log on SIGHUP and never unmounts.
func TestBackgroundSIGHUPReopensLog(t *testing.T) {
	s := newStore(t, "file")
	s.put(t, "f", []byte("x"))
	m := mount(t, s)
	require.NoError(t, os.Rename(m.log, m.log+".1"))
	for range 2 { // twice: each rotation gets a new file
		require.NoError(t, syscall.Kill(m.pid, syscall.SIGHUP))
		require.Eventually(t, func() bool { b, _ := os.ReadFile(m.log); return strings.Contains(string(b), "reopened the log file") },
			10*time.Second, 20*time.Millisecond)
		require.NoError(t, os.Rename(m.log, m.log+".2"))
	}
	got, err := os.ReadFile(filepath.Join(m.dir, "f"))
	require.NoError(t, err)
	assert.Equal(t, "x", string(got))
	assert.True(t, alive(m.pid))
}

// TestBackgroundErrorPrintedOnce: a failed background mount prints its
// error once, on a line of its own; the log has it once, as a record.
func TestBackgroundErrorPrintedOnce(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(t.TempDir(), "ferry.log")
	long := "gs://" + strings.Repeat("a", 70) // a bucket name too long: refused by the child
	cmd := exec.Command(ferryBin, "--log-file", logFile, "--anonymous", "--endpoint", "http://127.0.0.1:1", long, dir)
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Regexp(t, `^ferry: [^\n]*must be 3 to 63 characters long\n$`, string(out))
	assert.Equal(t, 1, strings.Count(string(out), "characters long"), "printed once: %q", out)
	logs, err := os.ReadFile(logFile)
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(logs), "characters long"), "logged once:\n%s", logs)
	assert.NotContains(t, string(logs), "ferry: ", "the child's own error line")
	assert.False(t, isMounted(dir))
}

// TestDetachedMountSecondSIGTERM: a ferry detached lazily with a file
// open keeps serving it after SIGTERM, until a second SIGTERM ends it:
// the open file then fails, and nothing is left mounted.
func TestDetachedMountSecondSIGTERM(t *testing.T) {
	s := newStore(t, "file")
	s.put(t, "f", content("f", 8<<20))
	m := mount(t, s)
	f, err := os.Open(filepath.Join(m.dir, "f"))
	require.NoError(t, err)
	defer f.Close()
	logged := func(s string) bool { b, _ := os.ReadFile(m.log); return strings.Contains(string(b), s) }

	require.NoError(t, syscall.Kill(m.pid, syscall.SIGTERM))
	require.Eventually(t, func() bool { return logged("detached it; serving the open files") }, 20*time.Second, 20*time.Millisecond)
	assert.False(t, isMounted(m.dir), "detached from the mount point")
	buf := make([]byte, 5)
	_, err = f.ReadAt(buf, 0)
	require.NoError(t, err, "the open file is still served")
	require.True(t, alive(m.pid))

	require.NoError(t, syscall.Kill(m.pid, syscall.SIGTERM))
	require.Eventually(t, func() bool { return !alive(m.pid) }, 20*time.Second, 50*time.Millisecond,
		"a second SIGTERM did not end ferry")
	assert.True(t, logged("second signal: ending the connection"))
	_, err = f.ReadAt(buf, 7<<20) // beyond what the kernel read ahead
	assert.ErrorIs(t, err, syscall.ENOTCONN, "the open file fails once the connection is ended")
}
