package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitFor polls cond every 50ms for at most d: a guard against hangs, not
// a timing assertion.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

func sortedNames(objs map[string][]byte) []string {
	names := make([]string, 0, len(objs))
	for n := range objs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TestKill9MidEpochThenRestart: ferry is killed with SIGKILL in the middle
// of epoch 1. Restarting it on the same mount point needs no manual
// cleanup (ferry detaches its own dead mount), every byte of epoch 2 is
// right, and the cache kept what was complete: epoch 2 moves fewer bytes
// from the store than the dataset holds.
func TestKill9MidEpochThenRestart(t *testing.T) {
	s := newStore(t, "s3")
	objs := dataset(t, s, "train", 12, 4<<20+321)
	names := sortedNames(objs)
	var total int64
	for _, d := range objs {
		total += int64(len(d))
	}
	cacheDir := t.TempDir()
	dir := t.TempDir()
	args := []string{"--cache-dir", cacheDir, "--metadata-ttl", "-1"}
	m := mountAt(t, s, dir, args...)

	// Half the epoch completes; the index commits at least every second.
	for _, n := range names[:6] {
		requireSameFile(t, filepath.Join(m.dir, n), objs[n])
	}
	time.Sleep(2500 * time.Millisecond)

	// The rest is being read when the daemon dies.
	var wg sync.WaitGroup
	started := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, n := range names[6:] {
			f, err := os.Open(filepath.Join(m.dir, n))
			if err != nil {
				return
			}
			buf := make([]byte, 256<<10)
			for off := int64(0); ; off += int64(len(buf)) {
				k, err := f.ReadAt(buf, off)
				if k > 0 && !bytes.Equal(buf[:k], objs[n][off:off+int64(k)]) {
					t.Errorf("%s: wrong bytes at %d before the crash", n, off)
				}
				if i == 0 && off == 0 {
					close(started)
				}
				if err != nil {
					break
				}
			}
			f.Close()
		}
	}()
	<-started
	require.NoError(t, syscall.Kill(m.pid, syscall.SIGKILL))
	require.True(t, waitFor(10*time.Second, func() bool { return !alive(m.pid) }), "ferry survived SIGKILL")
	wg.Wait()
	var st syscall.Statfs_t
	require.ErrorIs(t, syscall.Statfs(dir, &st), syscall.ENOTCONN, "a killed daemon leaves a dead mount")

	// Restart on the same directory and cache, without cleaning up.
	served := s.bytesServed()
	m2 := mountAt(t, s, dir, append(args, "--metrics-addr", freeAddr(t))...)
	dropCaches(t)
	readAll(t, m2, objs)
	epoch2 := s.bytesServed() - served
	t.Logf("epoch 2 after the crash moved %.1f MiB of %.1f MiB from the store", float64(epoch2)/(1<<20), float64(total)/(1<<20))
	assert.Less(t, epoch2, total-int64(4*(4<<20)), "the cache lost blocks that were complete before the crash")
	// Served from the cache: through ferry, or by the kernel from cache
	// files held whole (passthrough).
	assert.Positive(t, m2.metric(t, "ferry_cache_hits_bytes_total", nil)+m2.metric(t, "ferry_fs_passthrough_opens_total", nil))
}

// TestRemountOverDeadMount: mounting on a directory whose ferry daemon was
// killed detaches the dead mount and mounts in its place, not on top,
// also when the new mount names the directory through a symlink.
func TestRemountOverDeadMount(t *testing.T) {
	s := newStore(t, "file")
	s.put(t, "f", []byte("x"))
	dir := t.TempDir()
	m := mountAt(t, s, dir)
	require.NoError(t, syscall.Kill(m.pid, syscall.SIGKILL))
	require.True(t, waitFor(10*time.Second, func() bool { return !alive(m.pid) }))
	// The process can look gone (a zombie leader) while its other threads
	// still hold /dev/fuse open; the mount is dead once statfs says so.
	require.True(t, waitFor(10*time.Second, func() bool {
		var st syscall.Statfs_t
		return errors.Is(syscall.Statfs(dir, &st), syscall.ENOTCONN)
	}), "a killed daemon leaves a dead mount")
	alias := filepath.Join(t.TempDir(), "alias")
	require.NoError(t, os.Symlink(dir, alias))
	m2 := mountAt(t, s, alias)
	m2.dir = dir // mountinfo names the real path; so must the cleanup
	requireSameFile(t, filepath.Join(m2.dir, "f"), []byte("x"))
	mounts := 0
	for _, line := range bytes.Split(must(os.ReadFile("/proc/self/mountinfo")), []byte("\n")) {
		if f := bytes.Fields(line); len(f) > 4 && string(f[4]) == dir {
			mounts++
		}
	}
	assert.Equal(t, 1, mounts, "the dead mount must be detached, not stacked under the new one")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestSIGTERMUnderLoad: SIGTERM while readers hold files open and read
// them: the mount point is freed (lazily detached once busy), the open
// files keep reading correct bytes until closed, and then the daemon
// exits with nothing left mounted.
func TestSIGTERMUnderLoad(t *testing.T) {
	s := newStore(t, "gcs")
	objs := dataset(t, s, "load", 4, 8<<20+3)
	m := mount(t, s, "--cache-dir", t.TempDir())

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var opened sync.WaitGroup
	errs := make(chan error, len(objs))
	for _, n := range sortedNames(objs) {
		wg.Add(1)
		opened.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Open(filepath.Join(m.dir, n))
			opened.Done()
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			want := objs[n]
			buf := make([]byte, 512<<10)
			// Read the file over and over until told to stop, then once more.
			for pass, last := 0, false; ; pass++ {
				select {
				case <-stop:
					last = true
				default:
				}
				for off := int64(0); off < int64(len(want)); {
					k, err := f.ReadAt(buf, off)
					if k > 0 && !bytes.Equal(buf[:k], want[off:off+int64(k)]) {
						errs <- fmt.Errorf("%s: wrong bytes at %d in pass %d", n, off, pass)
						return
					}
					off += int64(k)
					if err != nil && !(errors.Is(err, io.EOF) && off == int64(len(want))) {
						errs <- fmt.Errorf("%s: pass %d: %w", n, pass, err)
						return
					}
				}
				if last {
					return
				}
			}
		}()
	}
	opened.Wait()
	require.NoError(t, syscall.Kill(m.pid, syscall.SIGTERM))
	require.True(t, waitFor(30*time.Second, func() bool { return !isMounted(m.dir) }),
		"the mount point is still mounted after SIGTERM")
	assert.True(t, alive(m.pid), "the daemon must keep serving the open files")
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.True(t, waitFor(30*time.Second, func() bool { return !alive(m.pid) }),
		"the daemon did not exit once its files were closed")
	logs, _ := os.ReadFile(m.log)
	assert.Contains(t, string(logs), "detached")
}
