package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// ferryCmd runs the ferry binary (a subcommand) and returns its output
// and exit code.
func ferryCmd(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(ferryBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Stdin = strings.NewReader(stdin)
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err, "ferry %v", args)
	}
	return out.String(), errb.String(), code
}

type checkReport struct {
	Paths []struct {
		Path        string  `json:"path"`
		Files       int64   `json:"files"`
		Bytes       int64   `json:"bytes"`
		CachedBytes int64   `json:"cached_bytes"`
		Percent     float64 `json:"percent"`
	} `json:"paths"`
	Total struct {
		Files       int64   `json:"files"`
		Bytes       int64   `json:"bytes"`
		CachedBytes int64   `json:"cached_bytes"`
		Percent     float64 `json:"percent"`
	} `json:"total"`
}

func warmCheck(t *testing.T, paths ...string) checkReport {
	t.Helper()
	out, errOut, code := ferryCmd(t, "", append([]string{"warm", "--check", "--json"}, paths...)...)
	require.Zero(t, code, "warm --check: %s%s", out, errOut)
	var r checkReport
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	return r
}

type warmReport struct {
	Files       int64 `json:"files"`
	Bytes       int64 `json:"bytes"`
	CachedFiles int64 `json:"already_cached_files"`
	Errors      int64 `json:"errors"`
}

// readHalfRandomly reads the first half of path in 1 MiB pieces, last
// piece first, with kernel readahead off: neither the kernel nor ferry
// sees a sequential stream, so only those bytes are fetched.
func readHalfRandomly(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM))
	buf := make([]byte, 1<<20)
	for off := size/2 - int64(len(buf)); off >= 0; off -= int64(len(buf)) {
		_, err := f.ReadAt(buf, off)
		require.NoError(t, err)
	}
}

// TestOperateWarm: warm --check reports 0% on a cold cache and the right
// share after reading half a file; warm fills the cache so that the next
// epoch makes no store reads; the metrics show it.
func TestOperateWarm(t *testing.T) {
	s := newStore(t, "gcs")
	objs := dataset(t, s, "train", 6, 3<<20+4321)
	sub := dataset(t, s, "train/sub", 4, 512<<10)
	half := dataset(t, s, "half", 1, 8<<20)
	m := mount(t, s, "--cache-dir", t.TempDir(), "--metadata-ttl", "-1", "--metrics-addr", freeAddr(t))
	train := filepath.Join(m.dir, "train")

	// Cold: 0%.
	r := warmCheck(t, train)
	require.Len(t, r.Paths, 1)
	assert.EqualValues(t, len(objs)+len(sub), r.Paths[0].Files)
	assert.EqualValues(t, 6*(3<<20+4321)+4*(512<<10), r.Paths[0].Bytes)
	assert.Zero(t, r.Paths[0].CachedBytes)
	assert.Zero(t, r.Paths[0].Percent)
	assert.Zero(t, storeReads(t, m), "--check fetched data")

	// Half of one file, read randomly: 50%, give or take a cache block.
	halfPath := filepath.Join(m.dir, "half/obj000")
	readHalfRandomly(t, halfPath, 8<<20)
	r = warmCheck(t, halfPath)
	t.Logf("after reading half: %.2f%% (%d bytes)", r.Total.Percent, r.Total.CachedBytes)
	assert.GreaterOrEqual(t, r.Total.CachedBytes, int64(4<<20))
	assert.LessOrEqual(t, r.Total.CachedBytes, int64(4<<20+64<<10))
	assert.InDelta(t, 100*float64(r.Total.CachedBytes)/float64(8<<20), r.Total.Percent, 1e-9)
	// And the rest of the mount is untouched: two paths and a total.
	r = warmCheck(t, train, filepath.Join(m.dir, "half"))
	require.Len(t, r.Paths, 2)
	assert.Zero(t, r.Paths[0].Percent)
	assert.InDelta(t, 50, r.Paths[1].Percent, 1)
	assert.InDelta(t, 100*float64(r.Total.CachedBytes)/float64(r.Total.Bytes), r.Total.Percent, 1e-9)
	// A file named twice counts once in the total.
	r = warmCheck(t, halfPath, filepath.Join(m.dir, "half"))
	assert.EqualValues(t, 1, r.Total.Files)
	assert.InDelta(t, 50, r.Total.Percent, 1)

	// Warm the tree (one file also named through --list on stdin) with a
	// progress bar.
	out, errOut, code := ferryCmd(t, filepath.Join(m.dir, "half/obj000")+"\n",
		"warm", "--parallel", "4", "--progress", "always", "--json", "--list", "-", train)
	require.Zero(t, code, "warm: %s%s", out, errOut)
	var w warmReport
	require.NoError(t, json.Unmarshal([]byte(out), &w), out)
	// The cache held none of them before: files the mount opened ahead of
	// warm's reads are read too, not counted as already cached.
	assert.EqualValues(t, len(objs)+len(sub)+1, w.Files)
	assert.Zero(t, w.CachedFiles)
	assert.Zero(t, w.Errors)
	assert.Contains(t, errOut, "files", "progress bar on stderr")
	assert.Contains(t, errOut, "MiB", "progress bar shows bytes")

	r = warmCheck(t, train, halfPath)
	assert.Equal(t, 100.0, r.Total.Percent)

	// The next epoch comes from the disk cache: no store reads, no bytes.
	dropCaches(t)
	reads, served := storeReads(t, m), s.bytesServed()
	readAll(t, m, objs)
	readAll(t, m, sub)
	readAll(t, m, half)
	assert.Equal(t, reads, storeReads(t, m), "store reads after warm")
	assert.Equal(t, served, s.bytesServed(), "store bytes after warm")

	assert.Positive(t, m.metric(t, "ferry_cache_hits_total", nil))
	assert.Positive(t, m.metric(t, "ferry_cache_hits_bytes_total", nil))
	assert.Positive(t, m.metric(t, "ferry_fuse_ops_total", map[string]string{"op": "read"}))
	assert.Positive(t, m.metric(t, "ferry_fuse_ops_total", map[string]string{"op": "lookup"}))

	// Warming again reads nothing: every file is already cached.
	out, errOut, code = ferryCmd(t, "", "warm", "--json", train)
	require.Zero(t, code, "warm: %s%s", out, errOut)
	w = warmReport{}
	require.NoError(t, json.Unmarshal([]byte(out), &w), out)
	assert.Zero(t, w.Files)
	assert.EqualValues(t, len(objs)+len(sub), w.CachedFiles)

	// Errors are reported and counted, and the text summary says so.
	out, errOut, code = ferryCmd(t, "", "warm", filepath.Join(m.dir, "nope"), "/proc/self")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no such file")
	assert.Contains(t, errOut, "not on a ferry mount")
	assert.Contains(t, out, "2 errors")
}

// TestOperateInvalidate: on a mount that caches metadata forever, a
// changed or added object is invisible until `ferry invalidate`, and
// visible, from the store, right after it.
func TestOperateInvalidate(t *testing.T) {
	s := newStore(t, "s3")
	s.put(t, "d/f", []byte("version one"))
	s.put(t, "d/g", []byte("untouched"))
	m := mount(t, s, "--cache-dir", t.TempDir(), "--metadata-ttl", "-1", "--negative-ttl", "-1",
		"--metrics-addr", freeAddr(t))
	f := filepath.Join(m.dir, "d/f")

	requireSameFile(t, f, []byte("version one"))
	assertDir(t, filepath.Join(m.dir, "d"), "f", "g")
	_, err := os.Stat(filepath.Join(m.dir, "d/new"))
	require.ErrorIs(t, err, os.ErrNotExist)

	s.put(t, "d/f", []byte("version two, longer"))
	s.put(t, "d/new", []byte("new"))
	fi, err := os.Stat(f)
	require.NoError(t, err)
	assert.EqualValues(t, len("version one"), fi.Size(), "cached forever")
	_, err = os.Stat(filepath.Join(m.dir, "d/new"))
	require.ErrorIs(t, err, os.ErrNotExist, "cached forever")

	// No xattrs: ferry answers none, so `ls -l` costs no extra round trip
	// per entry; ferry invalidate finds the socket through mountinfo.
	_, err = unix.Getxattr(m.dir, "user.ferry.control", make([]byte, 256))
	require.Error(t, err)

	// One file.
	before := m.metric(t, "ferry_store_requests_total", nil)
	out, errOut, code := ferryCmd(t, "", "invalidate", f)
	require.Zero(t, code, "%s%s", out, errOut)
	assert.Contains(t, out, "invalidated "+f)
	fi, err = os.Stat(f)
	require.NoError(t, err)
	assert.EqualValues(t, len("version two, longer"), fi.Size())
	requireSameFile(t, f, []byte("version two, longer"))
	assert.Greater(t, m.metric(t, "ferry_store_requests_total", nil), before, "the lookup went to the store")

	// A name that does not exist yet on the mount is found through its
	// parent; its directory's listing is dropped with it.
	out, errOut, code = ferryCmd(t, "", "invalidate", filepath.Join(m.dir, "d/new"))
	require.Zero(t, code, "%s%s", out, errOut)
	requireSameFile(t, filepath.Join(m.dir, "d/new"), []byte("new"))
	assertDir(t, filepath.Join(m.dir, "d"), "f", "g", "new")

	// The whole mount, with its data: nothing cached is left.
	r := warmCheck(t, filepath.Join(m.dir, "d"))
	require.Positive(t, r.Total.CachedBytes)
	s.put(t, "d/g", []byte("touched!!"))
	out, errOut, code = ferryCmd(t, "", "invalidate", "--data", m.dir)
	require.Zero(t, code, "%s%s", out, errOut)
	assert.Contains(t, out, "cached files")
	r = warmCheck(t, filepath.Join(m.dir, "d"))
	assert.Zero(t, r.Total.CachedBytes, "--data dropped the disk cache")
	requireSameFile(t, filepath.Join(m.dir, "d/g"), []byte("touched!!"))

	// Not a ferry mount.
	_, errOut, code = ferryCmd(t, "", "invalidate", t.TempDir())
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "not on a ferry mount")
}

// TestOperatePID1SIGTERM: ferry as PID 1 of its own PID and mount
// namespace (as the container entrypoint runs) unmounts and exits 0 on
// SIGTERM. A process kept in the same mount namespace shows the mount
// gone afterwards.
func TestOperatePID1SIGTERM(t *testing.T) {
	s := newStore(t, "file")
	s.put(t, "a", []byte("hello"))
	dir := t.TempDir()
	// --kill-child and Pdeathsig: ferry goes with unshare, and unshare
	// with the test.
	cmd := exec.Command("unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private",
		ferryBin, "--foreground", s.url, dir)
	logs := new(lockedBuffer)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	var exitErr error
	exited := make(chan struct{}) // closed once cmd has ended, with exitErr
	go func() { exitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	pid := onlyChild(t, cmd.Process.Pid) // PID 1 inside
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	assert.Regexp(t, `NSpid:\s+\d+\s+1\n`, string(status), "ferry is PID 1 in its namespace")

	mountedIn := func(pid int) bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		return err == nil && bytes.Contains(b, []byte(" "+dir+" ")) && bytes.Contains(b, []byte("fuse.ferry"))
	}
	require.Eventually(t, func() bool { return mountedIn(pid) }, 20*time.Second, 50*time.Millisecond, "mount never appeared; log:\n%s", logs)
	assert.False(t, isMounted(dir), "the mount leaked into the test's namespace")

	// Something else in ferry's mount namespace, to look at it after
	// ferry is gone.
	holder := exec.Command("nsenter", "--mount=/proc/"+strconv.Itoa(pid)+"/ns/mnt", "sleep", "60")
	require.NoError(t, holder.Start())
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	require.Eventually(t, func() bool { return mountedIn(holder.Process.Pid) }, 5*time.Second, 20*time.Millisecond)

	require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
	select {
	case <-exited:
		require.NoError(t, exitErr, "ferry as PID 1 did not exit 0 on SIGTERM; log:\n%s", logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("ferry as PID 1 ignored SIGTERM; log:\n%s", logs)
	}
	assert.False(t, mountedIn(holder.Process.Pid), "the mount outlived ferry")
	assert.Contains(t, logs.String(), "unmounted")
}

// TestControlAfterLazyRemount: a ferry detached while busy (umount -l,
// which ferry itself does when SIGTERM finds its mount busy) and another
// mounted in its place: ferry invalidate reaches the new one, never the
// detached one, also after the detached daemon exits.
func TestControlAfterLazyRemount(t *testing.T) {
	a, b := newStore(t, "file"), newStore(t, "file")
	a.put(t, "d/f", []byte("from a"))
	b.put(t, "d/f", []byte("from b"))
	dir := t.TempDir()
	ma := mountAt(t, a, dir)
	held, err := os.Open(filepath.Join(dir, "d/f"))
	require.NoError(t, err)
	defer held.Close()
	require.NoError(t, exec.Command("umount", "-l", dir).Run())
	mb := mountAt(t, b, dir)
	requireSameFile(t, filepath.Join(dir, "d/f"), []byte("from b"))
	logOf := func(m *mounted) string { l, _ := os.ReadFile(m.log); return string(l) }

	invalidate := func() {
		t.Helper()
		out, errOut, code := ferryCmd(t, "", "invalidate", filepath.Join(dir, "d"))
		require.Equal(t, 0, code, "%s%s", out, errOut)
		require.Eventually(t, func() bool { return strings.Count(logOf(mb), "control: invalidate") > 0 }, 5*time.Second, 20*time.Millisecond)
	}
	invalidate()
	assert.NotContains(t, logOf(ma), "control: invalidate", "the detached mount's daemon was asked")

	// The detached daemon exits once its last file closes; the socket it
	// had must stay the new mount's.
	held.Close()
	require.True(t, waitFor(15*time.Second, func() bool { return !alive(ma.pid) }), "the detached daemon did not exit")
	before := strings.Count(logOf(mb), "control: invalidate")
	out, errOut, code := ferryCmd(t, "", "invalidate", filepath.Join(dir, "d"))
	require.Equal(t, 0, code, "%s%s", out, errOut)
	assert.Equal(t, before+1, strings.Count(logOf(mb), "control: invalidate"))
}

// TestOperateWarmThroughLinkAndAsUser: warm follows a link given as its
// path, and a user who cannot reach the root-only control socket still
// warms (reading everything, with a warning) instead of failing every file.
func TestOperateWarmThroughLinkAndAsUser(t *testing.T) {
	s := newStore(t, "file")
	objs := dataset(t, s, "train", 3, 256<<10)
	// Everything the other user needs, searchable by them.
	pub, err := os.MkdirTemp("", "ferry-pub-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(pub) })
	require.NoError(t, os.Chmod(pub, 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(pub, "mnt"), 0o755))
	m := mountAt(t, s, filepath.Join(pub, "mnt"), "--cache-dir", t.TempDir(), "--allow-other")
	link := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.Symlink(filepath.Join(m.dir, "train"), link))

	out, errOut, code := ferryCmd(t, "", "warm", "--json", link)
	require.Zero(t, code, "warm through a link: %s%s", out, errOut)
	var w warmReport
	require.NoError(t, json.Unmarshal([]byte(out), &w), out)
	assert.EqualValues(t, len(objs), w.Files+w.CachedFiles)

	// A path already covered by an earlier one is no error.
	out, errOut, code = ferryCmd(t, "", "warm", filepath.Join(m.dir, "train"), filepath.Join(m.dir, "train", "obj000"))
	require.Zero(t, code, "%s%s", out, errOut)

	// An empty directory is nothing to warm: say so.
	require.NoError(t, os.Mkdir(filepath.Join(strings.TrimPrefix(s.url, "file://"), "empty"), 0o755))
	out, errOut, code = ferryCmd(t, "", "warm", filepath.Join(m.dir, "empty"))
	assert.Equal(t, 1, code, "%s%s", out, errOut)
	assert.Contains(t, errOut, "no files found")

	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv")
	}
	bin := filepath.Join(pub, "ferry")
	data, err := os.ReadFile(ferryBin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, data, 0o755))
	for d := filepath.Dir(bin); d != "/"; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		require.NoError(t, err)
		if fi.Mode().Perm()&0o001 == 0 {
			t.Skipf("%s is not searchable by other users", d)
		}
	}
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "warm", "--json", filepath.Join(m.dir, "train"))
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	require.NoError(t, cmd.Run(), "warm as nobody: %s\nstderr: %s", o.String(), e.String())
	w = warmReport{}
	require.NoError(t, json.Unmarshal(o.Bytes(), &w), o.String())
	assert.EqualValues(t, len(objs), w.Files, "read everything")
	assert.Zero(t, w.Errors)
	assert.Contains(t, e.String(), "cannot ask the mount what it has cached")
}

// TestOperateWarmCacheTooSmall: warming more than the disk cache holds
// says so and fails, rather than report a warm tree.
func TestOperateWarmCacheTooSmall(t *testing.T) {
	s := newStore(t, "file")
	objs := dataset(t, s, "train", 4, 3<<20)
	m := mount(t, s, "--cache-dir", t.TempDir(), "--cache-size", "4MiB")
	out, errOut, code := ferryCmd(t, "", "warm", "--json", filepath.Join(m.dir, "train"))
	assert.Equal(t, 1, code, "%s%s", out, errOut)
	assert.Contains(t, errOut, "does not hold")
	var w struct {
		Files        int64 `json:"files"`
		NotKeptFiles int64 `json:"not_kept_files"`
		NotKeptBytes int64 `json:"not_kept_bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &w), out)
	assert.EqualValues(t, len(objs), w.Files)
	assert.Positive(t, w.NotKeptFiles)
	assert.GreaterOrEqual(t, w.NotKeptBytes, int64(len(objs)*(3<<20)-(4<<20)))
}
