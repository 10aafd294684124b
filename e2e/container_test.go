package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMountPropagatesLikeADaemonSet plays deploy/kubernetes' DaemonSet
// (and sidecar) with mount namespaces: a "node" whose directory for the
// mount is shared, a "ferry container" made from it with that
// propagation kept (Bidirectional; Docker's rshared), and a reader
// container whose mounts are slaves of the node's (HostToContainer),
// started before ferry. The mount made in ferry's container reaches the
// reader, who reads as another user (--allow-other); a ferry killed with
// SIGKILL (OOM) leaves a dead mount there; the restarted ferry detaches
// it by itself and its new mount reaches the reader, not stacked on the
// dead one; SIGTERM (pod deletion) unmounts everywhere. The test's own
// namespace never sees any of it.
func TestMountPropagatesLikeADaemonSet(t *testing.T) {
	for _, tool := range []string{"unshare", "nsenter", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	s := newStore(t, "file")
	want := "read through a mount made in another container"
	s.put(t, "d/f", []byte(want))
	parent := publicTempDir(t, "ferry-node-") // /var/lib/ferry/mnt
	mnt := filepath.Join(parent, "train")

	node := newMountNS(t, nil, "private")
	node.must(t, "mount", "-t", "tmpfs", "-o", "mode=0755,size=1m", "ferry-test-node", parent)
	node.must(t, "mount", "--make-shared", parent)
	node.must(t, "mkdir", mnt)
	reader := newMountNS(t, node, "slave")

	// A container of ferry's: its own mount and PID namespaces, the
	// node's mounts copied with their propagation, ferry as PID 1.
	type container struct {
		pid  int           // ferry's, in the test's PID namespace
		done chan struct{} // closed when the container has ended, with err
		err  error
		logs *lockedBuffer
	}
	start := func() *container {
		t.Helper()
		cmd := exec.Command("nsenter", "-t", strconv.Itoa(node.pid), "-m", "--",
			"unshare", "--mount", "--propagation", "unchanged", "--pid", "--fork", "--kill-child",
			ferryBin, "--foreground", "--allow-other", "--metadata-ttl", "-1", s.url, mnt)
		c := &container{done: make(chan struct{}), logs: new(lockedBuffer)}
		cmd.Stdout, cmd.Stderr = c.logs, c.logs
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		require.NoError(t, cmd.Start())
		go func() { c.err = cmd.Wait(); close(c.done) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill() // unshare; --kill-child takes ferry with it
			<-c.done
		})
		c.pid = onlyChild(t, cmd.Process.Pid)
		return c
	}
	// Whether the reader's mnt answers statfs, which always asks the
	// daemon; and whether that is ferry's mount answering.
	answers := func() (bool, string) {
		_, e, code := reader.run(t, "stat", "-f", mnt)
		return code == 0, e
	}
	// Served: a live FUSE mount answers statfs (a dead one fails; with
	// none, the node's tmpfs would answer), and only then is the list
	// read. In the other order a check during a restart could list the
	// dead mount, which ferry then detaches, and get the tmpfs's answer
	// before the new mount arrived (seen once in CI).
	served := func() bool {
		o, _, code := reader.run(t, "stat", "-f", "-c", "%t", mnt)
		if code != 0 || strings.TrimSpace(o) != fuseSuperMagic {
			return false
		}
		m, err := reader.mountsOn(mnt)
		return err == nil && len(m) > 0 && m[len(m)-1] == "fuse.ferry"
	}
	mountsOn := func(ns *mountNS) []string {
		t.Helper()
		m, err := ns.mountsOn(mnt)
		require.NoError(t, err)
		return m
	}
	readAsUser := func() {
		t.Helper()
		o, e, code := reader.run(t, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
			"cat", filepath.Join(mnt, "d", "f"))
		require.Zero(t, code, "the reader (uid 65534) could not read: %s", e)
		assert.Equal(t, want, o)
	}

	first := start()
	require.Eventually(t, served, 20*time.Second, 50*time.Millisecond,
		"the mount never reached the reader; log:\n%s", first.logs)
	assert.Equal(t, []string{"fuse.ferry"}, mountsOn(reader))
	assert.Equal(t, []string{"fuse.ferry"}, mountsOn(node), "not on the node")
	readAsUser()
	assert.NoDirExists(t, mnt, "the node's tmpfs leaked into the test's namespace")

	// Killed (OOM, SIGKILL): the reader is left with a dead mount.
	require.NoError(t, syscall.Kill(first.pid, syscall.SIGKILL))
	select {
	case <-first.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the container did not end with its ferry")
	}
	ok, e := answers()
	require.False(t, ok, "a killed ferry's mount still answers")
	assert.Contains(t, e, "not connected")

	// Restarted on the same directory (the container's restart policy):
	// ferry detaches its dead mount, and the detach and the new mount
	// both reach the reader.
	second := start()
	require.Eventually(t, served, 20*time.Second, 50*time.Millisecond,
		"the restarted mount never reached the reader; log:\n%s", second.logs)
	assert.Equal(t, []string{"fuse.ferry"}, mountsOn(reader), "the dead mount must be detached, not covered")
	assert.Equal(t, []string{"fuse.ferry"}, mountsOn(node), "the node's dead mount must be detached, not covered")
	readAsUser()

	// Pod deletion: SIGTERM to PID 1 unmounts, on the node and in the
	// reader too.
	require.NoError(t, syscall.Kill(second.pid, syscall.SIGTERM))
	select {
	case <-second.done:
		require.NoError(t, second.err, "ferry did not exit 0 on SIGTERM; log:\n%s", second.logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("ferry ignored SIGTERM; log:\n%s", second.logs)
	}
	assert.Empty(t, mountsOn(reader), "the unmount did not reach the reader")
	assert.Empty(t, mountsOn(node), "the unmount did not reach the node")
}

// mountNS is a mount namespace, held open by a sleeping process that
// ends at the test's cleanup, or with the test process (Pdeathsig).
type mountNS struct{ pid int }

// newMountNS makes a mount namespace, a copy of parent's (nil: the
// test's) with its mounts' propagation set as unshare --propagation
// does: private, slave, shared or unchanged.
func newMountNS(t *testing.T, parent *mountNS, propagation string) *mountNS {
	t.Helper()
	args := []string{"unshare", "--mount", "--propagation", propagation, "sleep", "600"}
	from := "/proc/self/ns/mnt"
	if parent != nil {
		args = append([]string{"nsenter", "-t", strconv.Itoa(parent.pid), "-m", "--"}, args...)
		from = fmt.Sprintf("/proc/%d/ns/mnt", parent.pid)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ns := &mountNS{pid: cmd.Process.Pid}
	// unshare sets the propagation after entering the namespace, then
	// runs sleep: before that, a mount there could reach the parent's.
	require.Eventually(t, func() bool {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ns.pid))
		return err == nil && strings.TrimSpace(string(comm)) == "sleep"
	}, 10*time.Second, 10*time.Millisecond)
	a, err1 := os.Readlink(from)
	b, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", ns.pid))
	require.True(t, err1 == nil && err2 == nil && a != b, "no mount namespace of its own")
	return ns
}

// run runs args in the namespace and returns their output and exit
// code: -1 if they could not run or did not end within a minute (a
// mount that hangs), with the reason in stderr. It may be called from
// any goroutine.
func (n *mountNS) run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(n.pid), "-m", "--"}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if x, ok := err.(*exec.ExitError); ok && ctx.Err() == nil {
		return o.String(), e.String(), x.ExitCode()
	}
	if err != nil {
		return o.String(), fmt.Sprintf("%snsenter %v: %v (%v)", e.String(), args, err, ctx.Err()), -1
	}
	return o.String(), e.String(), 0
}

// must runs args in the namespace and fails the test unless they succeed.
func (n *mountNS) must(t *testing.T, args ...string) {
	t.Helper()
	o, e, code := n.run(t, args...)
	require.Zero(t, code, "%v: %s%s", args, o, e)
}

// mountsOn lists the types of the file systems mounted on dir in the
// namespace, the first mounted first.
func (n *mountNS) mountsOn(dir string) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", n.pid))
	if err != nil {
		return nil, err
	}
	var types []string
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) > 4 && f[4] == dir && len(g) > 0 {
			types = append(types, g[0])
		}
	}
	return types, nil
}

// fuseSuperMagic is statfs's f_type of a FUSE mount, as stat -f -c %t
// prints it.
const fuseSuperMagic = "65735546"

// onlyChild waits for the process pid to have a child (unshare --fork's
// is the program it runs) and returns the child's PID.
func onlyChild(t *testing.T, pid int) int {
	t.Helper()
	var child int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if err != nil || len(bytes.Fields(b)) == 0 {
			return false
		}
		child, _ = strconv.Atoi(string(bytes.Fields(b)[0]))
		return child > 0
	}, 10*time.Second, 20*time.Millisecond)
	return child
}

// lockedBuffer is a bytes.Buffer that a process may write while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// publicTempDir makes a directory (removed at cleanup) that other users
// may search, and skips the test where its parents do not let them.
func publicTempDir(t *testing.T, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	for d := dir; d != "/"; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		require.NoError(t, err)
		if fi.Mode().Perm()&0o001 == 0 {
			t.Skipf("%s is not searchable by other users", d)
		}
	}
	return dir
}
