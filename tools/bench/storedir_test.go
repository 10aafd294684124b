package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// fakeHost answers for /dev/shm and any other directory as told.
type fakeHost struct {
	shmType, otherType int64
	shmFree            int64
	shmErr, otherErr   error
	memErr, xattrErr   error
	mem                int64
}

func (f fakeHost) probe() hostProbe {
	return hostProbe{
		statfs: func(dir string) (int64, int64, error) {
			if dir == shmDir {
				return f.shmType, f.shmFree, f.shmErr
			}
			return f.otherType, 1 << 40, f.otherErr
		},
		memAvailable: func() (int64, error) { return f.mem, f.memErr },
		userXattrs:   func(string) error { return f.xattrErr },
	}
}

func TestChooseStoreDir(t *testing.T) {
	const ext4 = 0xef53
	o := Options{Store: "gcs", WorkDir: "/tmp/ferry-benchmark"}
	data, files := int64(4<<30), 4016
	need := storeRoom(data, files)
	beside := max(need, memBeside+512<<20) // ferry's default --memory-limit
	roomy := fakeHost{shmType: unix.TMPFS_MAGIC, shmFree: 24 << 30, mem: 22 << 30, otherType: ext4}
	shm := filepath.Join(shmDir, storeDirName(o, shmDir))
	assert.True(t, strings.HasPrefix(shm, "/dev/shm/ferry-benchmark-store-gcs-"), shm)

	p := chooseStoreDir(o, data, files, roomy.probe())
	assert.Equal(t, storePlace{Dir: shm, InMemory: true}, p)
	assert.Contains(t, p.describe(), "in memory")

	onDisk := func(o Options, h fakeHost, why string) {
		t.Helper()
		p := chooseStoreDir(o, data, files, h.probe())
		assert.Equal(t, "/tmp/ferry-benchmark/ferry-benchmark-store-"+o.Store, p.Dir)
		assert.False(t, p.InMemory)
		assert.Contains(t, p.Why, why)
		assert.Contains(t, p.describe(), "on disk")
	}
	h := roomy
	h.shmType = ext4
	onDisk(o, h, "not a tmpfs")
	h = roomy
	h.shmErr = os.ErrNotExist
	onDisk(o, h, "does not exist")
	h = roomy
	h.shmFree = need - 1
	onDisk(o, h, "free")
	h = roomy
	h.mem = need + beside - 1
	onDisk(o, h, "more must stay free")
	h = roomy
	h.memErr = errors.New("no meminfo")
	onDisk(o, h, "no meminfo")
	h = roomy
	h.mem = need + beside
	assert.True(t, chooseStoreDir(o, data, files, h.probe()).InMemory, "exactly enough memory")

	// A larger --memory-limit for ferry leaves less for the objects.
	big := o
	big.FerryArgs = []string{"--memory-limit", "8GiB"}
	h.mem = need + beside
	onDisk(big, h, "more must stay free")
	h.mem = need + memBeside + 8<<30
	assert.True(t, chooseStoreDir(big, data, files, h.probe()).InMemory)

	// A large dataset needs as much again beside it.
	large := int64(11 << 30)
	h = roomy
	h.mem = storeRoom(large, files) + memBeside + 512<<20
	p = chooseStoreDir(o, large, files, h.probe())
	assert.False(t, p.InMemory, "11 GiB of objects and 4.5 GiB beside")
	assert.Contains(t, p.Why, "more must stay free")
	h.mem = 2 * storeRoom(large, files)
	assert.True(t, chooseStoreDir(o, large, files, h.probe()).InMemory)

	// versitygw needs user extended attributes; fake-gcs-server does not.
	h = roomy
	h.xattrErr = unix.EOPNOTSUPP
	assert.True(t, chooseStoreDir(o, data, files, h.probe()).InMemory, "gcs")
	s3 := o
	s3.Store = "s3"
	onDisk(s3, h, "extended attributes")
	assert.True(t, chooseStoreDir(s3, data, files, roomy.probe()).InMemory)

	// --store-dir wins, and the emulator gets a directory of its own in it.
	o.StoreDir = "/srv/scratch"
	p = chooseStoreDir(o, data, files, roomy.probe())
	assert.Equal(t, storePlace{Dir: "/srv/scratch/ferry-benchmark-store-gcs"}, p)
	h = roomy
	h.otherType, h.otherErr = unix.TMPFS_MAGIC, os.ErrNotExist
	assert.False(t, chooseStoreDir(o, data, files, h.probe()).InMemory, "statfs failed: not known to be memory")
	h.otherErr = nil
	assert.True(t, chooseStoreDir(o, data, files, h.probe()).InMemory, "a tmpfs given")
	o.StoreDir = shmDir
	p = chooseStoreDir(o, 1<<50, files, roomy.probe())
	assert.Equal(t, storePlace{Dir: shm, InMemory: true}, p, "given, it is used even if it looks too small")
}

func TestStoreDirNameSeparatesWorkDirs(t *testing.T) {
	a := Options{Store: "gcs", WorkDir: "/tmp/ferry-benchmark"}
	b := a
	b.WorkDir = "/scratch/bench"
	assert.NotEqual(t, storeDirName(a, shmDir), storeDirName(b, shmDir), "two work directories, two directories in /dev/shm")
	assert.Equal(t, storeDirName(a, shmDir), storeDirName(a, shmDir), "the same run after run: a killed run's objects are found")
	assert.Equal(t, "ferry-benchmark-store-gcs", storeDirName(a, a.WorkDir), "under the work directory, already its own")
	s3 := a
	s3.Store = "s3"
	assert.NotEqual(t, storeDirName(a, shmDir), storeDirName(s3, shmDir))
}

func TestParseMemAvailable(t *testing.T) {
	n, err := parseMemAvailable([]byte("MemTotal:       24683548 kB\nMemFree:        23000000 kB\nMemAvailable:   22999000 kB\n"))
	require.NoError(t, err)
	assert.Equal(t, int64(22999000)<<10, n)
	_, err = parseMemAvailable([]byte("MemTotal: 1 kB\n"))
	assert.Error(t, err)
	_, err = parseMemAvailable([]byte("MemAvailable: lots kB\n"))
	assert.Error(t, err)

	b, err := os.ReadFile("/proc/meminfo")
	if err == nil {
		n, err := parseMemAvailable(b)
		require.NoError(t, err, "this machine's /proc/meminfo")
		assert.Positive(t, n)
	}
}

func TestRealHostProbes(t *testing.T) {
	dir := t.TempDir()
	_, avail, err := realHost.statfs(dir)
	require.NoError(t, err)
	assert.Positive(t, avail)
	_, _, err = realHost.statfs(filepath.Join(dir, "missing"))
	assert.Error(t, err)

	assert.Error(t, realHost.userXattrs(filepath.Join(dir, "missing")))
	if err := realHost.userXattrs(dir); err == nil {
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Empty(t, entries, "the probe's file is removed")
	}
}
