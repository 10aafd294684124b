package e2e

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var kinds = []string{"gcs", "s3", "file"}

// TestReadsMatchSource reads objects of awkward sizes through the mount
// and compares byte for byte: whole, at random offsets with odd buffer
// sizes, and with 8 concurrent preads on one descriptor.
func TestReadsMatchSource(t *testing.T) {
	sizes := []int{0, 1, 4095, 1<<20 + 1, 64 << 20}
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			s := newStore(t, kind)
			objs := map[string][]byte{}
			for _, n := range sizes {
				name := fmt.Sprintf("data/size-%d", n)
				objs[name] = content(kind+name, n)
				s.put(t, name, objs[name])
			}
			m := mount(t, s)
			for name, want := range objs {
				requireSameFile(t, filepath.Join(m.dir, name), want)
			}

			big := objs["data/size-67108864"]
			f, err := os.Open(filepath.Join(m.dir, "data/size-67108864"))
			require.NoError(t, err)
			defer f.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			for range 50 {
				size := 1 + rng.IntN(3<<20)
				off := rng.Int64N(int64(len(big)))
				buf := make([]byte, size)
				n, err := f.ReadAt(buf, off)
				want := big[off:min(off+int64(size), int64(len(big)))]
				if n < size {
					require.ErrorIs(t, err, io.EOF)
				} else {
					require.NoError(t, err)
				}
				require.True(t, bytes.Equal(buf[:n], want), "pread(%d, %d) differs", off, size)
			}

			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 9))
					buf := make([]byte, 777_777)
					for range 20 {
						off := rng.Int64N(int64(len(big) - len(buf)))
						if _, err := f.ReadAt(buf, off); err != nil {
							errs <- err
							return
						}
						if !bytes.Equal(buf, big[off:off+int64(len(buf))]) {
							errs <- fmt.Errorf("concurrent pread at %d differs", off)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
		})
	}
}

// TestTreeShape: implicit directories, markers, awkward names, names no
// POSIX path can hold, a file shadowed by a directory, and paging.
func TestTreeShape(t *testing.T) {
	for _, kind := range []string{"gcs", "s3"} {
		t.Run(kind, func(t *testing.T) {
			s := newStore(t, kind)
			for _, name := range []string{
				"implicit/a/b/c.txt",
				"with space/ünïcødé %+#?&=.txt",
				"ok.txt",
			} {
				s.put(t, name, []byte(name))
			}
			if kind == "gcs" {
				// Names only GCS's in-memory emulator can hold: markers,
				// empty components, dot components, a file beside a
				// directory of the same name.
				for _, name := range []string{"marker/", "a//b", "dots/../escape", "dots/./x", "shadow", "shadow/inner"} {
					s.put(t, name, []byte("x"))
				}
			}
			long := strings.Repeat("L", 300)
			if kind == "gcs" {
				// versitygw stores objects as files, so it cannot hold a
				// component longer than 255 bytes either.
				s.put(t, "long/"+long[:200]+"/"+long, []byte("too long"))
			} else {
				s.put(t, "long/"+long[:200]+"/ok", []byte("ok"))
			}
			var many []string
			for i := range 1100 {
				many = append(many, fmt.Sprintf("many/f%05d", i))
			}
			putAll(t, s, many)

			m := mount(t, s)
			assertDir(t, filepath.Join(m.dir, "implicit/a/b"), "c.txt")
			requireSameFile(t, filepath.Join(m.dir, "implicit/a/b/c.txt"), []byte("implicit/a/b/c.txt"))
			requireSameFile(t, filepath.Join(m.dir, "with space/ünïcødé %+#?&=.txt"), []byte("with space/ünïcødé %+#?&=.txt"))
			if kind == "gcs" {
				// The 300-byte component cannot be a file name: hidden.
				assertDir(t, filepath.Join(m.dir, "long", long[:200]))
			} else {
				assertDir(t, filepath.Join(m.dir, "long", long[:200]), "ok")
			}
			if kind == "gcs" {
				st, err := os.Stat(filepath.Join(m.dir, "marker"))
				require.NoError(t, err)
				assert.True(t, st.IsDir(), "a marker object is a directory")
				assertDir(t, filepath.Join(m.dir, "marker"))
				// "dots/../escape" and "dots/./x" have components no
				// path can hold: both hidden, nothing escapes.
				assertDir(t, filepath.Join(m.dir, "dots"))
				_, err = os.Stat(filepath.Join(m.dir, "escape"))
				assert.ErrorIs(t, err, os.ErrNotExist, "'..' in an object name must not escape")
				st, err = os.Stat(filepath.Join(m.dir, "shadow"))
				require.NoError(t, err)
				assert.True(t, st.IsDir(), "the directory wins over a file of the same name")
			}
			ents, err := os.ReadDir(filepath.Join(m.dir, "many"))
			require.NoError(t, err)
			require.Len(t, ents, 1100, "listing must page past 1000")
			for i, e := range ents {
				require.Equal(t, many[i], "many/"+e.Name())
			}
			_, err = os.Stat(filepath.Join(m.dir, "nope"))
			assert.ErrorIs(t, err, os.ErrNotExist)
		})
	}
}

func putAll(t *testing.T, s *store, names []string) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, n := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.put(t, n, []byte(n))
		}()
	}
	wg.Wait()
}

func assertDir(t *testing.T, dir string, want ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	sort.Strings(want)
	if len(want) == 0 {
		want = nil
	}
	assert.Equal(t, want, got, "entries of %s", dir)
}

// TestWritesAreRefused: the mount is read-only.
func TestWritesAreRefused(t *testing.T) {
	s := newStore(t, "file")
	s.put(t, "f", []byte("x"))
	m := mount(t, s)
	err := os.WriteFile(filepath.Join(m.dir, "new"), []byte("x"), 0o644)
	require.ErrorIs(t, err, syscall.EROFS)
	require.ErrorIs(t, os.Remove(filepath.Join(m.dir, "f")), syscall.EROFS)
	require.ErrorIs(t, os.Mkdir(filepath.Join(m.dir, "d"), 0o755), syscall.EROFS)
}

// TestTTLZeroSeesChanges: with no metadata caching an overwrite, a delete
// and a new object are visible on the next lookup.
func TestTTLZeroSeesChanges(t *testing.T) {
	for _, kind := range []string{"gcs", "s3"} {
		t.Run(kind, func(t *testing.T) {
			s := newStore(t, kind)
			s.put(t, "d/a", []byte("one"))
			s.put(t, "d/gone", []byte("x"))
			m := mount(t, s, "--metadata-ttl", "0", "--negative-ttl", "0")
			requireSameFile(t, filepath.Join(m.dir, "d/a"), []byte("one"))
			_, err := os.Stat(filepath.Join(m.dir, "d/new"))
			require.ErrorIs(t, err, os.ErrNotExist)
			assertDir(t, filepath.Join(m.dir, "d"), "a", "gone")

			s.put(t, "d/a", []byte("second version"))
			s.put(t, "d/new", []byte("new"))
			require.NoError(t, s.w.Delete(t.Context(), "d/gone"))

			requireSameFile(t, filepath.Join(m.dir, "d/a"), []byte("second version"))
			requireSameFile(t, filepath.Join(m.dir, "d/new"), []byte("new"))
			_, err = os.Stat(filepath.Join(m.dir, "d/gone"))
			require.ErrorIs(t, err, os.ErrNotExist)
			assertDir(t, filepath.Join(m.dir, "d"), "a", "new")
		})
	}
}

// TestTTLForeverMakesNoRequests: with TTL -1 a walk that has been done
// once is answered from ferry's cache, even after the kernel's caches are
// dropped: the store sees no request.
func TestTTLForeverMakesNoRequests(t *testing.T) {
	for _, kind := range []string{"gcs", "s3"} {
		t.Run(kind, func(t *testing.T) {
			s := newStore(t, kind)
			var names []string
			for i := range 200 {
				names = append(names, fmt.Sprintf("t/d%02d/f%03d", i%10, i))
			}
			putAll(t, s, names)
			m := mount(t, s, "--metadata-ttl", "-1")
			walk := func() int {
				out, err := exec.Command("ls", "-lR", m.dir).CombinedOutput()
				require.NoError(t, err, "%s", out)
				for _, n := range names[:20] {
					_, err := os.Stat(filepath.Join(m.dir, n))
					require.NoError(t, err)
				}
				_, err = os.Stat(filepath.Join(m.dir, "t/missing"))
				require.ErrorIs(t, err, os.ErrNotExist)
				return strings.Count(string(out), "\n")
			}
			lines := walk()
			require.Greater(t, lines, 200)
			before := s.requests()
			for range 3 {
				dropCaches(t)
				require.Equal(t, lines, walk())
			}
			assert.Equal(t, before, s.requests(), "repeated walks with TTL -1 reached the store")
		})
	}
}

// TestBackgroundModeErrors: the parent exits non-zero with a one-line
// error and nothing is mounted.
func TestBackgroundModeErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing mount point", []string{"file://" + dir, filepath.Join(dir, "nope")}, "does not exist"},
		{"bad scheme", []string{"ftp://x", dir}, "scheme"},
		{"bad size", []string{"--memory-limit", "lots", "file://" + dir, dir}, "--memory-limit"},
		{"unknown flag", []string{"--no-such-flag", "file://" + dir, dir}, "no-such-flag"},
		{"missing source dir", []string{"file:///definitely/not/here", dir}, "not"},
		{"missing bucket", []string{"--endpoint", "http://127.0.0.1:1", "--anonymous", "gs://no-such-bucket", dir}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			out, err := exec.Command(ferryBin, tc.args...).CombinedOutput()
			require.Error(t, err, "%s", out)
			assert.Contains(t, string(out), tc.want)
			assert.LessOrEqual(t, strings.Count(strings.TrimSpace(string(out)), "\n"), 2, "want a short error, got:\n%s", out)
			assert.False(t, isMounted(dir), "nothing may stay mounted")
			t.Logf("%s: %v: %s", tc.name, time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))
		})
	}
}

// TestBackgroundRelativePaths: relative paths given to a background
// mount mean what they mean in the caller's directory, for the mount
// point, the cache and the log alike; the daemon then leaves that
// directory so it is not kept busy.
func TestBackgroundRelativePaths(t *testing.T) {
	s := newStore(t, "file")
	s.put(t, "f", []byte("relative"))
	work := t.TempDir()
	// Unique names: resolved against / instead (the old bug) they name
	// nothing, so the mount fails rather than land somewhere else.
	rel := fmt.Sprintf("ferry-rel-%d", os.Getpid())
	for _, d := range []string{rel + "-mnt", rel + "-cache"} {
		require.NoError(t, os.Mkdir(filepath.Join(work, d), 0o700))
	}
	t.Cleanup(func() { _ = os.Remove("/" + rel + ".log") })
	args := append(append([]string{}, s.args...),
		"--cache-dir", rel+"-cache", "--log-file", rel+".log", s.url, rel+"-mnt")
	cmd := exec.Command(ferryBin, args...)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), s.env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := &mounted{dir: filepath.Join(work, rel+"-mnt"), pid: daemonPID(rel + "-mnt"), log: filepath.Join(work, rel+".log")}
	t.Cleanup(func() { m.unmount(t) })
	require.True(t, isMounted(m.dir), "not mounted at %s", m.dir)

	got, err := os.ReadFile(filepath.Join(m.dir, "f"))
	require.NoError(t, err)
	assert.Equal(t, "relative", string(got))
	assert.DirExists(t, filepath.Join(work, rel+"-cache", "v1"), "the cache is where the caller said")
	logs, err := os.ReadFile(m.log)
	require.NoError(t, err, "the log is where the caller said")
	assert.Contains(t, string(logs), "mounted")
	require.NotZero(t, m.pid)
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", m.pid))
	require.NoError(t, err)
	assert.Equal(t, "/", cwd, "the daemon keeps no directory busy")
}

// startForeground mounts a file store holding "f" with ferry
// --foreground (run through wrap, e.g. nohup, if given) and waits until
// it is set up, not just mounted: a signal during setup aborts the mount.
// exited receives its exit; logs reads its log.
func startForeground(t *testing.T, wrap ...string) (cmd *exec.Cmd, exited <-chan error, dir string, logs func() string) {
	t.Helper()
	s := newStore(t, "file")
	s.put(t, "f", []byte("x"))
	dir = t.TempDir()
	logFile := filepath.Join(t.TempDir(), "ferry.log")
	argv := append(append(append(wrap, ferryBin), s.args...), "--foreground", "--log-file", logFile, s.url, dir)
	cmd = exec.Command(argv[0], argv[1:]...)
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	m := &mounted{dir: dir, pid: cmd.Process.Pid, log: logFile} // nohup execs ferry: same pid
	t.Cleanup(func() { m.unmount(t) })
	logs = func() string { b, _ := os.ReadFile(logFile); return string(b) }
	require.Eventually(t, func() bool { return strings.Contains(logs(), "msg=mounted") }, 20*time.Second, 20*time.Millisecond, "never mounted")
	return cmd, done, dir, logs
}

// TestForegroundUnderNohupIgnoresSIGHUP: started under nohup, a foreground
// ferry keeps serving on SIGHUP (it only reopens its log).
func TestForegroundUnderNohupIgnoresSIGHUP(t *testing.T) {
	cmd, exited, dir, logs := startForeground(t, "nohup")

	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP)) // nohup exec'd ferry: same pid
	select {
	case err := <-exited:
		t.Fatalf("exited on SIGHUP under nohup (%v); log:\n%s", err, logs())
	case <-time.After(time.Second):
	}
	got, err := os.ReadFile(filepath.Join(dir, "f"))
	require.NoError(t, err)
	assert.Equal(t, "x", string(got))
}

// TestSIGTERMUnmounts: the daemon unmounts and exits on SIGTERM.
func TestSIGTERMUnmounts(t *testing.T) {
	s := newStore(t, "file")
	s.put(t, "f", []byte("x"))
	m := mount(t, s)
	require.True(t, isMounted(m.dir))
	require.NoError(t, syscall.Kill(m.pid, syscall.SIGTERM))
	deadline := time.Now().Add(10 * time.Second)
	for (isMounted(m.dir) || alive(m.pid)) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	assert.False(t, isMounted(m.dir), "still mounted after SIGTERM")
	assert.False(t, alive(m.pid), "still running after SIGTERM")
}

// TestSIGTERMAfterOutsideDetach: SIGTERM to a ferry whose mount was
// detached from outside while a file is open (a Kubernetes preStop runs
// fusermount3 -uz, then the pod's ferry gets SIGTERM): ferry says so
// instead of retrying an unmount of what is no longer there and logging
// an error, serves the open file, and exits once it is closed.
func TestSIGTERMAfterOutsideDetach(t *testing.T) {
	s := newStore(t, "file")
	s.put(t, "f", []byte("still served"))
	m := mount(t, s)
	f, err := os.Open(filepath.Join(m.dir, "f"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, syscall.Unmount(m.dir, syscall.MNT_DETACH))
	require.False(t, isMounted(m.dir))
	require.NoError(t, syscall.Kill(m.pid, syscall.SIGTERM))
	logged := func(s string) bool {
		b, _ := os.ReadFile(m.log)
		return strings.Contains(string(b), s)
	}
	require.Eventually(t, func() bool { return logged("already detached") }, 10*time.Second, 20*time.Millisecond,
		"no word of the detached mount after SIGTERM")
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	assert.Equal(t, "still served", string(b))
	require.True(t, alive(m.pid), "ferry exited with a file open")
	require.NoError(t, f.Close())
	require.Eventually(t, func() bool { return !alive(m.pid) }, 10*time.Second, 50*time.Millisecond,
		"ferry did not exit once the file was closed")
	assert.False(t, logged("cannot unmount"), "an error logged for a mount detached on purpose")
}
