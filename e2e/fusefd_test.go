package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// fuseHelperEnv makes the test binary play a privileged helper (as the
// GKE gcsfuse CSI driver does for unprivileged pods): it opens /dev/fuse,
// mounts it on a directory, and passes the descriptor over a unix socket.
// Its value is "SOCKET|DIR".
const fuseHelperEnv = "FERRY_E2E_FUSE_HELPER"

func runFuseHelper(spec string) int {
	sock, dir, _ := strings.Cut(spec, "|")
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "fuse helper: %s: %v\n", what, err)
		return 1
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail("open /dev/fuse", err)
	}
	defer unix.Close(fd)
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,default_permissions,allow_other", fd)
	if err := unix.Mount("helper-mounted", dir, "fuse.ferry", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_RDONLY, opts); err != nil {
		return fail("mount", err)
	}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return fail("dial", err)
	}
	defer conn.Close()
	if _, _, err := conn.WriteMsgUnix([]byte("fuse"), unix.UnixRights(fd), nil); err != nil {
		return fail("send", err)
	}
	return 0
}

// receiveFD accepts one connection on ln and returns the descriptor sent
// over it (SCM_RIGHTS).
func receiveFD(t *testing.T, ln *net.UnixListener) *os.File {
	t.Helper()
	require.NoError(t, ln.SetDeadline(time.Now().Add(30*time.Second)))
	conn, err := ln.AcceptUnix()
	require.NoError(t, err)
	defer conn.Close()
	buf, oob := make([]byte, 16), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	require.NoError(t, err)
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	fds, err := unix.ParseUnixRights(&msgs[0])
	require.NoError(t, err)
	require.Len(t, fds, 1)
	return os.NewFile(uintptr(fds[0]), "/dev/fuse")
}

// TestMountThroughPassedFD: ferry serves a /dev/fuse that another process
// opened and mounted, given as /dev/fd/N: the pattern for pods without
// privilege. ferry then neither mounts nor unmounts: on SIGTERM it stops
// serving, and the helper unmounts.
func TestMountThroughPassedFD(t *testing.T) {
	s := newStore(t, "file")
	want := content("f", 3<<20)
	s.put(t, "dir/f", want)
	dir := t.TempDir()
	sock := filepath.Join(t.TempDir(), "fuse.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	require.NoError(t, err)
	defer ln.Close()
	t.Cleanup(func() {
		if isMounted(dir) {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})

	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), fuseHelperEnv+"="+sock+"|"+dir)
	out, err := helper.StdoutPipe()
	require.NoError(t, err)
	helper.Stderr = helper.Stdout
	require.NoError(t, helper.Start())
	dev := receiveFD(t, ln)
	msg := make([]byte, 4096)
	n, _ := out.Read(msg)
	require.NoError(t, helper.Wait(), "helper: %s", msg[:n])
	require.True(t, isMounted(dir), "the helper mounted %s", dir)

	logFile := filepath.Join(t.TempDir(), "ferry.log")
	cmd := exec.Command(ferryBin, "--log-file", logFile, "--cache-dir", t.TempDir(), s.url, "/dev/fd/3")
	cmd.ExtraFiles = []*os.File{dev} // fd 3
	require.NoError(t, cmd.Start())
	dev.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	logs := func() string { b, _ := os.ReadFile(logFile); return string(b) }
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})

	got, err := readFileWithin(t, filepath.Join(dir, "dir", "f"))
	require.NoError(t, err, "log:\n%s", logs())
	require.Equal(t, len(want), len(got))
	assert.Equal(t, want, got)
	assert.Contains(t, logs(), "mountpoint=/dev/fd/3")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "log:\n%s", logs())
	case <-time.After(20 * time.Second):
		t.Fatalf("ferry did not stop on SIGTERM; log:\n%s", logs())
	}
	assert.Contains(t, logs(), "the helper that mounted /dev/fuse unmounts it")
	// The helper's part: unmount what it mounted.
	require.NoError(t, syscall.Unmount(dir, 0))
	assert.False(t, isMounted(dir))

	// A descriptor that is not /dev/fuse, or not open, is refused.
	stdout, stderr, code := ferryCmd(t, "", s.url, "/dev/fd/9")
	assert.Equal(t, 1, code, stdout)
	assert.Contains(t, stderr, "descriptor 9 is not open")
	_, stderr, code = ferryCmd(t, "", s.url, "/dev/fd/0")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "descriptor 0 is not /dev/fuse")
}
