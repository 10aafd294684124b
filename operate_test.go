package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jacobsa/fuse"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"ferry/bucket/emulator"
	"ferry/daemon"
	"ferry/flags"
	"ferry/fs"
)

// parseConfig runs the real flag parsing on ferry-style arguments.
func parseConfig(t *testing.T, args ...string) *flags.Config {
	t.Helper()
	var cfg *flags.Config
	app := &cli.App{Flags: flags.CLIFlags(), Action: func(c *cli.Context) (err error) {
		cfg, err = flags.FromContext(c)
		return err
	}}
	args, err := permuteArgs(args)
	require.NoError(t, err)
	require.NoError(t, app.Run(append([]string{"ferry"}, args...)))
	return cfg
}

// TestMetricsNamesLint mounts in this process with a disk cache, scrapes
// /metrics and checks that every family follows the Prometheus naming
// conventions (promlint) and that the families operators need are there.
func TestMetricsNamesLint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	src, mnt, cache := t.TempDir(), t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "f"), []byte("data"), 0o644))
	port, err := emulator.FreePort()
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	cfg := parseConfig(t, "--foreground", "--cache-dir", cache, "--metrics-addr", addr,
		"--control-socket", sock, "file://"+src, mnt)

	ready := make(chan struct{})
	served := make(chan error, 1)
	go func() {
		served <- daemon.Serve(cfg, slog.New(slog.DiscardHandler), mountStack, func() { close(ready) })
	}()
	select {
	case <-ready:
	case err := <-served:
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("mount not ready")
	}
	t.Cleanup(func() {
		for range 50 {
			if err := fuse.Unmount(mnt); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		select {
		case err := <-served:
			assert.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("serve did not return after unmount")
		}
		_, err := os.Stat(sock)
		assert.True(t, os.IsNotExist(err), "the control socket is removed at exit")
	})

	fi, err := os.Stat(sock)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "control socket mode")

	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	body := string(b)
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)
	for _, name := range []string{
		// FUSE
		"ferry_fuse_ops_total", "ferry_fuse_op_duration_seconds", "ferry_fs_inodes",
		// disk cache
		"ferry_cache_hits_total", "ferry_cache_misses_total", "ferry_cache_hits_bytes_total",
		"ferry_cache_misses_bytes_total", "ferry_cache_evictions_total", "ferry_cache_corrupt_blocks_total",
		"ferry_cache_used_bytes", "ferry_cache_limit_bytes",
		// readahead
		"ferry_readahead_budget_bytes", "ferry_readahead_budget_limit_bytes", "ferry_readahead_budget_peak_bytes",
		"ferry_readahead_dropped_total", "ferry_readahead_window_bytes",
		"ferry_readahead_mapped_bytes", "ferry_readahead_mapped_free_bytes",
		// store (the mount's probe made a request)
		"ferry_store_requests_total", "ferry_store_request_duration_seconds", "ferry_store_read_bytes_total",
	} {
		assert.Contains(t, body, "\n# TYPE "+name+" ", name)
	}
}

// TestControlSocket: a stale socket is replaced, a live one is not, and
// requests get answers.
func TestControlSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "ctl.sock")
	// A stale socket: bound, then its listener gone without unlinking.
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	stale, err := net.Listen("unix", path)
	require.NoError(t, err)
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	cfg := &flags.Config{MountPoint: "/mnt/x", ControlSocket: path}
	c, err := startControl(cfg, slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, path, c.socketPath())

	// A second daemon on the same socket is refused.
	_, err = startControl(cfg, slog.New(slog.DiscardHandler), nil)
	assert.ErrorContains(t, err, "in use")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = callControl(ctx, path, &controlRequest{Op: "launch"})
	assert.ErrorContains(t, err, `unknown op "launch"`)
	_, err = callControl(ctx, path, &controlRequest{Op: "invalidate", Path: "/"})
	assert.ErrorContains(t, err, "not mounted")

	// Not a socket: refused, not removed.
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err = startControl(&flags.Config{ControlSocket: file}, slog.New(slog.DiscardHandler), nil)
	assert.ErrorContains(t, err, "not a socket")

	assert.Equal(t, "/run/ferry/", defaultControlSocket("/mnt/data")[:len("/run/ferry/")])
	assert.NotEqual(t, defaultControlSocket("/mnt/a"), defaultControlSocket("/mnt/b"))
}

// TestAbstractControlSocket: the two ends of an abstract control socket
// check each other's uid. A name held by a process other than the
// mount's owner is not asked; the daemon answers its own user and root,
// and drops another user's connections at once, holding nothing for
// them (copies of the test binary ask, and flood it, as uid 65534).
func TestAbstractControlSocket(t *testing.T) {
	uid, ok := abstractOwner(abstractControlSocket(65534, "/mnt/a"))
	assert.True(t, ok)
	assert.Equal(t, 65534, uid)
	_, ok = abstractOwner(defaultControlSocket("/mnt/a"))
	assert.False(t, ok)
	assert.NotEqual(t, abstractControlSocket(65534, "/mnt/a"), abstractControlSocket(65534, "/mnt/b"))
	assert.NotEqual(t, abstractControlSocket(65534, "/mnt/a"), abstractControlSocket(65533, "/mnt/a"))
	assert.True(t, uidAllowed(0, 1000, true, 65534))
	assert.True(t, uidAllowed(1000, 1000, true, 65534))
	assert.False(t, uidAllowed(1001, 1000, true, 65534))
	assert.True(t, uidAllowed(65534, 65534, true, 65534), "nobody, on a host")
	assert.False(t, uidAllowed(65534, 65534, false, 65534), "in a user namespace, anyone unmapped shows as 65534")
	assert.True(t, uidAllowed(0, 65534, false, 65534))
	if os.Getuid() == 65534 {
		t.Skip("runs as uid 65534, the owner the test plays")
	}
	ask := func(name string, req *controlRequest) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := callControl(ctx, name, req)
		return err
	}
	mp := fmt.Sprintf("/mnt/ferry-test-%d", os.Getpid())

	// Only a stream socket that listens counts as one.
	dgram, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: abstractControlSocket(65533, mp), Net: "unixgram"})
	require.NoError(t, err)
	defer dgram.Close()
	assert.False(t, listening(abstractControlSocket(65533, mp)), "a datagram socket is no listener")

	// Another process holds the name of uid 65534's mount: not asked.
	squatter, err := net.Listen("unix", abstractControlSocket(65534, mp))
	require.NoError(t, err)
	defer squatter.Close()
	assert.True(t, listening(abstractControlSocket(65534, mp)))
	heard := make(chan int, 1)
	go func() {
		conn, err := squatter.Accept()
		if err != nil {
			heard <- -1
			return
		}
		defer conn.Close()
		b, _ := io.ReadAll(conn)
		heard <- len(b)
	}()
	err = ask(abstractControlSocket(65534, mp), &controlRequest{Op: "cached", Path: "/x"})
	assert.ErrorContains(t, err, fmt.Sprintf("held by uid %d, not by the mount's owner (uid 65534)", os.Getuid()))
	select {
	case n := <-heard:
		assert.Zero(t, n, "the request reached the process holding the name")
	case <-time.After(10 * time.Second):
		t.Fatal("the client never hung up on the process holding the name")
	}

	// The daemon's own: its user is answered...
	name := abstractControlSocket(os.Getuid(), mp)
	ln, err := net.Listen("unix", name)
	require.NoError(t, err)
	c := &controlServer{log: slog.New(slog.DiscardHandler), fs: fs.NewControl(), path: name, ln: ln,
		abstract: true, identity: identityUIDMap(), overflow: overflowUID()}
	c.wg.Add(1)
	go c.serve()
	defer c.Close()
	ownerAnswered := func(msg string) {
		t.Helper()
		assert.ErrorContains(t, ask(name, &controlRequest{Op: "launch"}), `unknown op "launch"`, msg)
	}
	ownerAnswered("the daemon's own user was not answered")

	// ... and another user is not.
	if os.Getuid() != 0 {
		t.Skip("asking as another user needs root")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	data, err := os.ReadFile(exe)
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "ferry-ask-")
	require.NoError(t, err)
	defer os.RemoveAll(dir)
	require.NoError(t, os.Chmod(dir, 0o755))
	asker := filepath.Join(dir, "ferry.test")
	require.NoError(t, os.WriteFile(asker, data, 0o755))
	askAs := func(env ...string) *exec.Cmd {
		cmd := exec.Command(asker, "-test.run=^$")
		cmd.Env = append(append(os.Environ(), askControlEnv+"="+name), env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Pdeathsig: syscall.SIGKILL}
		return cmd
	}
	out, err := askAs().CombinedOutput()
	if err != nil {
		t.Skipf("cannot run a copy of the test binary as uid 65534 from %s (noexec, or parents closed to others?): %v: %s", dir, err, out)
	}
	assert.Contains(t, string(out), "uid 65534 asked: control socket:", "no error for another user")
	assert.NotContains(t, string(out), "unknown op", "another user was answered")

	// Another user's connections, held open: the daemon still answers
	// its own user, after them in its queue (so it has accepted them all),
	// and keeps none of them.
	openFDs := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return len(ents)
	}
	before := openFDs()
	flood := askAs(floodControlEnv + "=100")
	stdout, err := flood.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, flood.Start())
	defer func() { _ = flood.Process.Kill(); _ = flood.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "holding 100 connections\n", line)
	ownerAnswered("the daemon's own user was not answered while another user held connections")
	assert.Less(t, openFDs(), before+10, "the daemon holds another user's connections")
}

func TestReadPathList(t *testing.T) {
	f := filepath.Join(t.TempDir(), "list")
	require.NoError(t, os.WriteFile(f, []byte("/mnt/a\n\n/mnt/b c\r\n  \n"), 0o600))
	got, err := readPathList(f, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"/mnt/a", "/mnt/b c"}, got)
	got, err = readPathList("-", strings.NewReader("x\ny\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"x", "y"}, got)
}

// The user's runtime directory: $XDG_RUNTIME_DIR when set, else
// /run/user/UID only when it is a directory of the user's own that no
// one else may enter (another's, or an open one, could take the socket).
func TestUserRuntimeDir(t *testing.T) {
	base := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", "/somewhere/else")
	assert.Equal(t, "/somewhere/else", runtimeDirUnder(base))
	t.Setenv("XDG_RUNTIME_DIR", "")

	d := filepath.Join(base, strconv.Itoa(os.Getuid()))
	assert.Empty(t, runtimeDirUnder(base), "none made")
	require.NoError(t, os.Mkdir(d, 0o700))
	assert.Equal(t, d, runtimeDirUnder(base))
	require.NoError(t, os.Chmod(d, 0o750))
	assert.Empty(t, runtimeDirUnder(base), "open to the group")
	require.NoError(t, os.Chmod(d, 0o700))
	require.NoError(t, os.Chown(d, os.Getuid()+1, -1))
	assert.Empty(t, runtimeDirUnder(base), "another user's")
	require.NoError(t, os.Remove(d))
	private := t.TempDir()
	require.NoError(t, os.Chmod(private, 0o700))
	require.NoError(t, os.Symlink(private, d))
	assert.Empty(t, runtimeDirUnder(base), "a link, even to a private directory of the user's")
}
