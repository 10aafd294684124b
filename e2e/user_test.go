package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestMountAsUser: a user other than root mounts through fusermount3,
// reads, warms through the control socket in its XDG_RUNTIME_DIR (or,
// without one, /run/user/UID, or else an abstract socket, which answers
// the user and root only), and unmounts with fusermount3 -u; and
// when fusermount3 refuses, the error ferry prints in the background says
// why (fusermount3's own message goes to a stderr nobody sees). It runs
// in a mount namespace of its own, where /dev/fuse is a node the test
// makes on a tmpfs of that namespace: one the user may not open (mode
// 0600, as on this machine), then one it may (0666, the usual mode). The
// machine's /dev/fuse is left as it is, and the nodes go with the
// namespace.
func TestMountAsUser(t *testing.T) {
	for _, tool := range []string{"unshare", "nsenter", "setpriv", "fusermount3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	const uid = 65534 // nobody
	pub := publicTempDir(t, "ferry-user-")
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(pub, &st))
	if st.Flags&unix.ST_NOEXEC != 0 {
		t.Skipf("%s is on a noexec file system", pub)
	}
	bin := filepath.Join(pub, "ferry")
	data, err := os.ReadFile(ferryBin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, data, 0o755))
	src := filepath.Join(pub, "src")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "d"), 0o755))
	require.NoError(t, os.Chmod(src, 0o755))
	want := "read by a user other than root"
	require.NoError(t, os.WriteFile(filepath.Join(src, "d", "f"), []byte(want), 0o644))
	mnt, cache, xdg := filepath.Join(pub, "mnt"), filepath.Join(pub, "cache"), filepath.Join(pub, "xdg")
	// The user's state directory: with no syslog socket, the background
	// logs to $XDG_STATE_HOME/ferry/ferry.log.
	state := filepath.Join(pub, "state")
	for _, d := range []string{mnt, cache, xdg, state} {
		require.NoError(t, os.Mkdir(d, 0o700))
		require.NoError(t, os.Chown(d, uid, uid))
	}
	devs := filepath.Join(pub, "dev") // root's: a tmpfs in the namespace
	require.NoError(t, os.Mkdir(devs, 0o700))
	noAllowOther := filepath.Join(pub, "fuse.conf")
	require.NoError(t, os.WriteFile(noAllowOther, []byte("# user_allow_other\nmount_max = 1000\n"), 0o644))

	ns := newMountNS(t, nil, "private")
	// In it: root's commands (ns.must, ns.run), and the user's (in userEnv).
	userEnv := []string{"HOME=" + pub, "PATH=" + os.Getenv("PATH"), "XDG_RUNTIME_DIR=" + xdg, "XDG_STATE_HOME=" + state}
	run := func(user bool, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		if user {
			args = append(append([]string{"setpriv", "--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(uid),
				"--clear-groups", "env", "-i"}, userEnv...), args...)
		}
		return ns.run(t, args...)
	}
	t.Cleanup(func() {
		_, _, _ = run(false, "umount", "-l", mnt)
		killByExe(t, bin)
	})
	mountArgs := []string{bin, "--cache-dir", cache, "file://" + src, mnt}
	// The user's (or root's) warm of the mount, whose one file is
	// cached: it must reach the daemon to know that.
	warmAsksDaemon := func(user bool, msg string) {
		t.Helper()
		o, e, code := run(user, bin, "warm", "--json", mnt)
		require.Zero(t, code, "warm: %s%s", o, e)
		var w warmReport
		require.NoError(t, json.Unmarshal([]byte(o), &w), o)
		assert.EqualValues(t, 1, w.CachedFiles, msg)
		assert.NotContains(t, e, "cannot ask the mount")
	}
	unmountAsUser := func() {
		t.Helper()
		o, e, code := run(true, "fusermount3", "-u", mnt)
		require.Zero(t, code, "fusermount3 -u: %s%s", o, e)
		require.Eventually(t, func() bool { return len(pidsByExe(bin)) == 0 }, 10*time.Second, 50*time.Millisecond,
			"the daemon did not exit after fusermount3 -u")
	}
	ns.must(t, "mount", "-t", "tmpfs", "-o", "mode=0700,size=1m", "ferry-test-dev", devs)
	closed, open := filepath.Join(devs, "fuse-closed"), filepath.Join(devs, "fuse-open")
	ns.must(t, "mknod", "-m", "0600", closed, "c", "10", "229")
	ns.must(t, "mknod", "-m", "0666", open, "c", "10", "229")

	// /dev/fuse closed to the user: the error names it.
	ns.must(t, "mount", "--bind", closed, "/dev/fuse")
	o, e, code := run(true, mountArgs...)
	assert.NotZero(t, code, "mounted without access to /dev/fuse: %s%s", o, e)
	assert.Contains(t, e, "fusermount3 opens /dev/fuse as uid 65534")
	assert.Contains(t, e, "chmod 0666 /dev/fuse")
	ns.must(t, "umount", "/dev/fuse")
	ns.must(t, "mount", "--bind", open, "/dev/fuse")

	// --allow-other without user_allow_other in /etc/fuse.conf: so says
	// the error (in the foreground, next to fusermount3's own reason).
	if _, err := os.Stat("/etc/fuse.conf"); err == nil {
		ns.must(t, "mount", "--bind", noAllowOther, "/etc/fuse.conf")
	}
	o, e, code = run(true, append([]string{bin, "--foreground", "--allow-other"}, mountArgs[1:]...)...)
	assert.NotZero(t, code, "allow_other without user_allow_other: %s%s", o, e)
	assert.Contains(t, e, "only allowed if 'user_allow_other' is set", "fusermount3's reason")
	assert.Contains(t, e, "user_allow_other in /etc/fuse.conf")

	// The mount, by the user: reads, a warm that reaches the daemon, and
	// fusermount3 -u.
	o, e, code = run(true, mountArgs...)
	require.Zero(t, code, "mount as the user: %s%s", o, e)
	mounts, _, _ := run(false, "cat", "/proc/self/mountinfo")
	assert.Contains(t, mounts, " "+mnt+" ")
	assert.Contains(t, mounts, "user_id=65534", "mounted by the user")
	o, e, code = run(true, "cat", filepath.Join(mnt, "d", "f"))
	require.Zero(t, code, "%s", e)
	assert.Equal(t, want, o)
	warmAsksDaemon(true, "the read above filled the disk cache; warm asked the daemon")
	unmountAsUser()
	mounts, _, _ = run(false, "cat", "/proc/self/mountinfo")
	assert.NotContains(t, mounts, " "+mnt+" ")

	// With neither XDG_RUNTIME_DIR nor /run/user/UID (cron without a
	// login session), the socket is an abstract one. It answers the user
	// and root; another user is told it is not theirs (the daemon drops
	// them too: TestAbstractControlSocket). Root and that user can read
	// the mount only with --allow-other, which needs user_allow_other.
	userEnv = []string{"HOME=" + pub, "PATH=" + os.Getenv("PATH"), "XDG_STATE_HOME=" + state}
	fi, err := os.Stat("/run/user")
	runUser := err == nil && fi.IsDir()
	if runUser { // hidden by an empty one
		ns.must(t, "mount", "-t", "tmpfs", "-o", "mode=0755,size=1m", "ferry-test-run-user", "/run/user")
	}
	_, err = os.Stat("/etc/fuse.conf")
	others := err == nil
	if others {
		allowOther := filepath.Join(pub, "fuse-allow-other.conf")
		require.NoError(t, os.WriteFile(allowOther, []byte("user_allow_other\n"), 0o644))
		ns.must(t, "mount", "--bind", allowOther, "/etc/fuse.conf")
		mountArgs = append([]string{bin, "--allow-other"}, mountArgs[1:]...)
	} else {
		t.Log("no /etc/fuse.conf to bind user_allow_other on: root's and another user's requests are not tried")
	}
	o, e, code = run(true, mountArgs...)
	require.Zero(t, code, "mount as the user with no runtime directory: %s%s", o, e)
	unixSockets, err := os.ReadFile("/proc/net/unix")
	require.NoError(t, err)
	sum := sha256.Sum256([]byte(mnt))
	assert.Contains(t, string(unixSockets), " @ferry/65534/"+hex.EncodeToString(sum[:8])+"\n", "no abstract control socket")
	warmAsksDaemon(true, "warm asked the daemon through its abstract socket")
	if others {
		warmAsksDaemon(false, "root's warm asked the user's daemon through its abstract socket")
		_, e, code = ns.run(t, append(append([]string{"setpriv", "--reuid=65533", "--regid=65533", "--clear-groups", "env", "-i"},
			userEnv...), bin, "invalidate", mnt)...)
		assert.NotZero(t, code, "another user's invalidate was served")
		assert.Contains(t, e, "is only for uid 65534, who mounted it, and root")
	}
	unmountAsUser()

	// Without XDG_RUNTIME_DIR (sudo -u, su), the socket goes to
	// /run/user/UID, where a login made one: here on that tmpfs.
	if !runUser {
		t.Log("no /run/user to mount a tmpfs on: the mount with /run/user/UID is not tried")
		return
	}
	runtime := "/run/user/" + strconv.Itoa(uid)
	ns.must(t, "mkdir", "-m", "0700", runtime)
	ns.must(t, "chown", strconv.Itoa(uid)+":"+strconv.Itoa(uid), runtime)
	o, e, code = run(true, mountArgs...)
	require.Zero(t, code, "mount as the user without XDG_RUNTIME_DIR: %s%s", o, e)
	socks, _, _ := run(false, "ls", runtime+"/ferry")
	assert.Contains(t, socks, ".sock")
	warmAsksDaemon(true, "warm asked the daemon through /run/user")
	unmountAsUser()
}

// pidsByExe lists the processes running the executable at path.
func pidsByExe(path string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil && strings.TrimSuffix(exe, " (deleted)") == path {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killByExe kills the processes running the executable at path (a copy
// of ferry only this test runs) and waits for them to go.
func killByExe(t *testing.T, path string) {
	for _, pid := range pidsByExe(path) {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(pidsByExe(path)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if left := pidsByExe(path); len(left) > 0 {
		t.Errorf("processes of %s still running: %v", path, left)
	}
}
