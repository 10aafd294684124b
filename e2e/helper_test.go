package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// installHelper makes /sbin/mount.ferry point at the binary under test
// for the duration of the test, and restores whatever was there.
func installHelper(t *testing.T) {
	t.Helper()
	const helper = "/sbin/mount.ferry"
	old, err := os.Readlink(helper)
	switch {
	case err == nil:
		t.Cleanup(func() { _ = os.Remove(helper); _ = os.Symlink(old, helper) })
	case os.IsNotExist(err):
		t.Cleanup(func() { _ = os.Remove(helper) })
	default:
		t.Skipf("%s exists and is not a symlink; not replacing it", helper)
	}
	_ = os.Remove(helper)
	out, err := exec.Command(ferryBin, "install-helper", "--dest", helper).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// umountLater registers an unmount of dir and a wait for its daemon.
func umountLater(t *testing.T, dir string) {
	pid := daemonPID(dir)
	m := &mounted{dir: dir, pid: pid}
	t.Cleanup(func() { m.unmount(t) })
}

// TestMountTypeFerry: `mount -t ferry SOURCE DIR -o opts` runs
// /sbin/mount.ferry, maps fstab-style options to flags, and returns once
// the mount is live.
func TestMountTypeFerry(t *testing.T) {
	installHelper(t)
	s := newStore(t, "gcs")
	s.put(t, "dir/f.txt", []byte("through mount(8)"))
	dir := t.TempDir()
	// users: mount(8) adds noexec,nosuid,nodev, which must reach the kernel.
	opts := "ro,_netdev,nofail,noatime,nodiratime,users,x-systemd.automount,endpoint=" + strings.TrimPrefix(s.args[1], "") +
		",anonymous,metadata_ttl=-1,negative_ttl=10s,file_mode=0440,cache_dir=" + t.TempDir()
	out, err := exec.Command("mount", "-t", "ferry", s.url, dir, "-o", opts).CombinedOutput()
	require.NoError(t, err, "%s", out)
	umountLater(t, dir)
	require.True(t, isMounted(dir))
	requireSameFile(t, filepath.Join(dir, "dir/f.txt"), []byte("through mount(8)"))
	st, err := os.Stat(filepath.Join(dir, "dir/f.txt"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o440), st.Mode().Perm(), "file_mode reached the mount")
	mo, _ := mountOptions(t, dir)
	for _, o := range []string{"ro", "noexec", "nosuid", "nodev", "noatime"} {
		assert.Contains(t, mo, o, "mount options of %s", dir)
	}
}

// TestMountTypeFerryRejectsUnknownOption: a bad option is a clear error
// and nothing is mounted.
func TestMountTypeFerryRejectsUnknownOption(t *testing.T) {
	installHelper(t)
	src := t.TempDir()
	dir := t.TempDir()
	for _, opt := range []string{"cache_sise=10GiB", "memory_limit=lots", "metadata_ttl=-7"} {
		out, err := exec.Command("mount", "-t", "ferry", "file://"+src, dir, "-o", "ro,"+opt).CombinedOutput()
		require.Error(t, err, "%s accepted", opt)
		name := strings.SplitN(opt, "=", 2)[0]
		named := strings.Contains(string(out), name) || strings.Contains(string(out), strings.ReplaceAll(name, "_", "-"))
		assert.True(t, named, "error for %s should name it:\n%s", opt, out)
		t.Logf("%s: %s", opt, strings.TrimSpace(string(out)))
		assert.False(t, isMounted(dir))
	}
}

// TestFstabMountAll: `mount -a` over an fstab line mounts it (mount -T
// points mount at a temporary fstab instead of /etc/fstab).
func TestFstabMountAll(t *testing.T) {
	installHelper(t)
	s := newStore(t, "file")
	s.put(t, "train/shard-0", []byte("from fstab"))
	dir := t.TempDir()
	cache := t.TempDir()
	fstab := filepath.Join(t.TempDir(), "fstab")
	line := fmt.Sprintf("%s/train %s ferry ro,_netdev,nofail,cache_dir=%s,metadata_ttl=-1 0 0\n", s.url, dir, cache)
	require.NoError(t, os.WriteFile(fstab, []byte("# test fstab\n"+line), 0o644))
	out, err := exec.Command("mount", "-a", "-T", fstab).CombinedOutput()
	require.NoError(t, err, "%s", out)
	umountLater(t, dir)
	requireSameFile(t, filepath.Join(dir, "shard-0"), []byte("from fstab"))
	// A second mount -a does not stack a second mount.
	out, err = exec.Command("mount", "-a", "-T", fstab).CombinedOutput()
	t.Logf("second mount -a: err=%v %s", err, out)
	n := 0
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			n++
		}
	}
	assert.Equal(t, 1, n, "mounted once")
}

// TestMountNamespace: ferry in a fresh mount namespace (the way a
// privileged container runs it) mounts there only, serves reads, and
// unmounts cleanly on SIGTERM.
func TestMountNamespace(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare not installed")
	}
	s := newStore(t, "file")
	s.put(t, "f", []byte("inside the namespace"))
	dir := t.TempDir()
	log := filepath.Join(t.TempDir(), "ferry.log")
	script := fmt.Sprintf(`
%[1]s --foreground --log-file %[4]s %[2]s %[3]s &
pid=$!
for i in $(seq 200); do grep -q " %[3]s " /proc/self/mountinfo && break; sleep 0.05; done
echo "content=$(cat %[3]s/f)"
kill -TERM $pid
wait $pid
echo "exit=$?"
if grep -q " %[3]s " /proc/self/mountinfo; then echo STILL_MOUNTED; else echo UNMOUNTED; fi
`, ferryBin, s.url, dir, log)
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("namespace script hung:\n%s", out)
	}
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "content=inside the namespace")
	assert.Contains(t, string(out), "exit=0")
	assert.Contains(t, string(out), "UNMOUNTED")
	assert.False(t, isMounted(dir), "a namespaced mount must not leak into the parent namespace")
}

// TestInstallHelperKeepsTheNameGiven: the helper links to ferry by the
// name it was run as, so repointing that link on an upgrade keeps
// `mount -t ferry` working.
func TestInstallHelperKeepsTheNameGiven(t *testing.T) {
	dir := t.TempDir()
	current := filepath.Join(dir, "ferry-current")
	require.NoError(t, os.Symlink(ferryBin, current))
	dest := filepath.Join(dir, "mount.ferry")
	out, err := exec.Command(current, "install-helper", "--dest", dest).CombinedOutput()
	require.NoError(t, err, "%s", out)
	got, err := os.Readlink(dest)
	require.NoError(t, err)
	assert.Equal(t, current, got)
}
