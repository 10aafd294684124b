package control

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/flags"
	"ferry/fs"
)

// askControlEnv makes the test binary ask the control socket it names
// and print the answer, or with floodControlEnv hold that many
// connections to it open, unused, until killed (see
// TestAbstractControlSocket).
const (
	askControlEnv   = "FERRY_TEST_ASK_CONTROL"
	floodControlEnv = "FERRY_TEST_FLOOD_CONTROL"
)

func TestMain(m *testing.M) {
	if socket := os.Getenv(askControlEnv); socket != "" {
		os.Exit(askControlChild(socket))
	}
	os.Exit(m.Run())
}

// askControlChild is the test binary run with askControlEnv: it asks the
// socket and prints the answer, or (floodControlEnv) holds connections.
func askControlChild(socket string) int {
	if n, _ := strconv.Atoi(os.Getenv(floodControlEnv)); n > 0 {
		var conns []net.Conn // kept reachable: a lost conn is closed
		for i := range n {
			conn, err := net.Dial("unix", socket)
			if err != nil {
				fmt.Printf("connection %d: %v\n", i, err)
				return 1
			}
			conns = append(conns, conn)
		}
		fmt.Printf("holding %d connections\n", len(conns))
		time.Sleep(time.Hour)
		runtime.KeepAlive(conns)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := call(ctx, socket, &request{Op: "launch"})
	fmt.Printf("uid %d asked: %v\n", os.Getuid(), err)
	return 0
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

	cfg := Config{MountPoint: "/mnt/x", Socket: path, FS: fs.NewControl(), Logger: slog.New(slog.DiscardHandler)}
	c, err := Listen(cfg)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, path, c.Path())

	// A second daemon on the same socket is refused.
	_, err = Listen(cfg)
	assert.ErrorContains(t, err, "in use")
	var oe *flags.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "control-socket", oe.Option)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = call(ctx, path, &request{Op: "launch"})
	assert.ErrorContains(t, err, `unknown op "launch"`)
	_, err = call(ctx, path, &request{Op: "invalidate", Path: "/"})
	assert.ErrorContains(t, err, "not mounted")

	// Not a socket: refused, not removed.
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err = Listen(Config{Socket: file, FS: fs.NewControl(), Logger: slog.New(slog.DiscardHandler)})
	assert.ErrorContains(t, err, "not a socket")

	assert.Equal(t, "/run/ferry/", defaultSocket("/mnt/data")[:len("/run/ferry/")])
	assert.NotEqual(t, defaultSocket("/mnt/a"), defaultSocket("/mnt/b"))
}

// TestAbstractControlSocket: the two ends of an abstract control socket
// check each other's uid. A name held by a process other than the
// mount's owner is not asked; the daemon answers its own user and root,
// and drops another user's connections at once, holding nothing for
// them (copies of the test binary ask, and flood it, as uid 65534).
func TestAbstractControlSocket(t *testing.T) {
	if os.Getuid() == 65534 {
		t.Skip("runs as uid 65534, the owner the test plays")
	}
	mp := fmt.Sprintf("/mnt/ferry-test-%d", os.Getpid())

	// Only a stream socket that listens counts as one.
	dgram, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: abstractSocket(65533, mp), Net: "unixgram"})
	require.NoError(t, err)
	defer dgram.Close()
	assert.False(t, listening(abstractSocket(65533, mp)), "a datagram socket is no listener")

	// Another process holds the name of uid 65534's mount: not asked.
	squatter, err := net.Listen("unix", abstractSocket(65534, mp))
	require.NoError(t, err)
	defer squatter.Close()
	assert.True(t, listening(abstractSocket(65534, mp)))
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
	err = ask(abstractSocket(65534, mp), &request{Op: "cached", Path: "/x"})
	assert.ErrorContains(t, err, fmt.Sprintf("held by uid %d, not by the mount's owner (uid 65534)", os.Getuid()))
	select {
	case n := <-heard:
		assert.Zero(t, n, "the request reached the process holding the name")
	case <-time.After(10 * time.Second):
		t.Fatal("the client never hung up on the process holding the name")
	}

	// The daemon's own: its user is answered...
	name := abstractSocket(os.Getuid(), mp)
	ln, err := net.Listen("unix", name)
	require.NoError(t, err)
	c := &Server{log: slog.New(slog.DiscardHandler), fs: fs.NewControl(), path: name, ln: ln,
		abstract: true, identity: identityUIDMap(), overflow: overflowUID()}
	c.wg.Add(1)
	go c.serve()
	defer c.Close()
	ownerAnswered := func(msg string) {
		t.Helper()
		assert.ErrorContains(t, ask(name, &request{Op: "launch"}), `unknown op "launch"`, msg)
	}
	ownerAnswered("the daemon's own user was not answered")

	// ... and another user is not.
	if os.Getuid() != 0 {
		t.Skip("asking as another user needs root")
	}
	askAs := askerAsNobody(t, name)
	out, err := askAs().CombinedOutput()
	if err != nil {
		t.Skipf("cannot run a copy of the test binary as uid 65534 (noexec, or parents closed to others?): %v: %s", err, out)
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

// The names of abstract sockets, and whom their daemon answers.
func TestAbstractSocketRules(t *testing.T) {
	uid, ok := abstractOwner(abstractSocket(65534, "/mnt/a"))
	assert.True(t, ok)
	assert.Equal(t, 65534, uid)
	_, ok = abstractOwner(defaultSocket("/mnt/a"))
	assert.False(t, ok)
	assert.NotEqual(t, abstractSocket(65534, "/mnt/a"), abstractSocket(65534, "/mnt/b"))
	assert.NotEqual(t, abstractSocket(65534, "/mnt/a"), abstractSocket(65533, "/mnt/a"))
	assert.True(t, uidAllowed(0, 1000, true, 65534))
	assert.True(t, uidAllowed(1000, 1000, true, 65534))
	assert.False(t, uidAllowed(1001, 1000, true, 65534))
	assert.True(t, uidAllowed(65534, 65534, true, 65534), "nobody, on a host")
	assert.False(t, uidAllowed(65534, 65534, false, 65534), "in a user namespace, anyone unmapped shows as 65534")
	assert.True(t, uidAllowed(0, 65534, false, 65534))
}

// ask sends one request to the socket name and returns its error.
func ask(name string, req *request) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := call(ctx, name, req)
	return err
}

// askerAsNobody returns commands that run a copy of the test binary as
// uid 65534 (where that user can run it), asking the socket name as
// askControlChild does.
func askerAsNobody(t *testing.T, name string) func(env ...string) *exec.Cmd {
	exe, err := os.Executable()
	require.NoError(t, err)
	data, err := os.ReadFile(exe)
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "ferry-ask-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	asker := filepath.Join(dir, "ferry.test")
	require.NoError(t, os.WriteFile(asker, data, 0o755))
	return func(env ...string) *exec.Cmd {
		cmd := exec.Command(asker, "-test.run=^$")
		cmd.Env = append(append(os.Environ(), askControlEnv+"="+name), env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Pdeathsig: syscall.SIGKILL}
		return cmd
	}
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
