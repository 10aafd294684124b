package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// fakeHost answers for /dev/shm and any other directory as told.
type fakeHost struct {
	shmType, otherType int64
	shmFree            int64
	shmErr, memErr     error
	mem                int64
}

func (f fakeHost) probe() hostProbe {
	return hostProbe{
		statfs: func(dir string) (int64, int64, error) {
			if dir == shmDir {
				return f.shmType, f.shmFree, f.shmErr
			}
			return f.otherType, 1 << 40, nil
		},
		memAvailable: func() (int64, error) { return f.mem, f.memErr },
	}
}

func TestChooseStoreDir(t *testing.T) {
	const ext4 = 0xef53
	o := Options{Store: "gcs", WorkDir: "/tmp/ferry-benchmark"}
	data := int64(4 << 30)
	need := storeRoom(data)
	roomy := fakeHost{shmType: unix.TMPFS_MAGIC, shmFree: 24 << 30, mem: 22 << 30}

	p := chooseStoreDir(o, data, roomy.probe())
	assert.Equal(t, storePlace{Dir: "/dev/shm/ferry-benchmark-store-gcs", InMemory: true}, p)
	assert.Contains(t, p.describe(), "in memory")

	onDisk := func(h fakeHost, why string) {
		t.Helper()
		p := chooseStoreDir(o, data, h.probe())
		assert.Equal(t, "/tmp/ferry-benchmark/ferry-benchmark-store-gcs", p.Dir)
		assert.False(t, p.InMemory)
		assert.Contains(t, p.Why, why)
		assert.Contains(t, p.describe(), "on disk")
	}
	h := roomy
	h.shmType = ext4
	onDisk(h, "not a tmpfs")
	h = roomy
	h.shmErr = os.ErrNotExist
	onDisk(h, "does not exist")
	h = roomy
	h.shmFree = need - 1
	onDisk(h, "free")
	h = roomy
	h.mem = need + memBeside - 1
	onDisk(h, "more must stay free")
	h = roomy
	h.memErr = errors.New("no meminfo")
	onDisk(h, "no meminfo")
	h = roomy
	h.mem = need + memBeside
	assert.True(t, chooseStoreDir(o, data, h.probe()).InMemory, "exactly enough memory")

	// --store-dir wins, and the emulator gets a directory of its own in it.
	o.StoreDir = "/srv/scratch"
	p = chooseStoreDir(o, data, roomy.probe())
	assert.Equal(t, storePlace{Dir: "/srv/scratch/ferry-benchmark-store-gcs"}, p)
	o.StoreDir = shmDir
	p = chooseStoreDir(o, 1<<50, roomy.probe())
	assert.Equal(t, storePlace{Dir: "/dev/shm/ferry-benchmark-store-gcs", InMemory: true}, p, "given, it is used even if it looks too small")
	o.Store = "s3"
	assert.Equal(t, "/dev/shm/ferry-benchmark-store-s3", chooseStoreDir(o, data, roomy.probe()).Dir)
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

func TestRealHostStatfs(t *testing.T) {
	dir := t.TempDir()
	_, avail, err := realHost.statfs(dir)
	require.NoError(t, err)
	assert.Positive(t, avail)
	_, _, err = realHost.statfs(filepath.Join(dir, "missing"))
	assert.Error(t, err)
}
