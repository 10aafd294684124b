package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

func TestParseStatCPU(t *testing.T) {
	// The fixture's command name holds a space and parentheses; utime is
	// 1234 ticks and stime 567 ticks.
	d, err := parseStatCPU(fixture(t, "stat"))
	require.NoError(t, err)
	assert.Equal(t, 18010*time.Millisecond, d)
}

func TestParseSteal(t *testing.T) {
	stat := "cpu  1329574 0 723600 2134155 396267 0 37463 15403 0 0\ncpu0 667487 0 370122 1053988 203540 0 16069 7492 0 0\n"
	d, err := parseSteal([]byte(stat))
	require.NoError(t, err)
	assert.Equal(t, 154030*time.Millisecond, d, "15403 ticks of 10 ms")
	for _, in := range []string{"", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3 4 5 6 7\n", "cpu 1 2 3 4 5 6 7 x 9\n"} {
		_, err := parseSteal([]byte(in))
		assert.Error(t, err, "%q", in)
	}
}

func TestParseStatCPURejectsGarbage(t *testing.T) {
	for _, in := range []string{"", "1 cat R 2 3", "1 (cat) R 1 2 3", "1 (cat) R 1 2 3 4 5 6 7 8 9 10 x 12 13"} {
		_, err := parseStatCPU([]byte(in))
		assert.Error(t, err, "%q", in)
	}
}

func TestProcCPUOfSelf(t *testing.T) {
	// Not a timing: only that the live file parses.
	_, err := procCPU(os.Getpid())
	require.NoError(t, err)
}

func TestParseStatusField(t *testing.T) {
	st := fixture(t, "status")
	hwm, err := parseStatusField(st, "VmHWM")
	require.NoError(t, err)
	assert.Equal(t, int64(256<<20), hwm)
	rss, err := parseStatusField(st, "VmRSS")
	require.NoError(t, err)
	assert.Equal(t, int64(128<<20), rss)
	_, err = parseStatusField(st, "VmSwap")
	assert.Error(t, err)
	_, err = parseStatusField([]byte("VmHWM:\t12 MB\n"), "VmHWM")
	assert.Error(t, err, "unit other than kB")
}

func TestProcPeakRSSOfSelf(t *testing.T) {
	n, err := procPeakRSS(os.Getpid())
	require.NoError(t, err)
	assert.Positive(t, n)
}

func TestMountedAt(t *testing.T) {
	mi := fixture(t, "mountinfo")
	fstype, ok := mountedAt(mi, "/tmp/bench dir/mnt")
	require.True(t, ok, "octal-escaped space in the mount point")
	assert.Equal(t, "fuse.ferry", fstype)
	fstype, ok = mountedAt(mi, "/")
	require.True(t, ok)
	assert.Equal(t, "ext4", fstype)
	_, ok = mountedAt(mi, "/tmp/bench")
	assert.False(t, ok)
	_, ok = mountedAt(mi, `/tmp/bench\040dir/mnt`)
	assert.False(t, ok, "the escaped form is not the path")
}

func TestUnescapeMountinfo(t *testing.T) {
	assert.Equal(t, "a b\tc\\d", unescapeMountinfo(`a\040b\011c\134d`))
	assert.Equal(t, `tail\04`, unescapeMountinfo(`tail\04`), "a short escape at the end is kept")
}

func TestParseCPUModel(t *testing.T) {
	assert.Equal(t, "Intel(R) Xeon(R) Processor", parseCPUModel(fixture(t, "cpuinfo")))
	assert.Equal(t, "", parseCPUModel([]byte("processor : 0\n")))
}

func TestDescribeMachine(t *testing.T) {
	m := describeMachine(os.TempDir())
	assert.Positive(t, m.CPUs)
	assert.Positive(t, m.MemTotal)
	assert.NotEmpty(t, m.Kernel)
	assert.NotEmpty(t, m.DiskFS)
}

func TestMountOf(t *testing.T) {
	mi := fixture(t, "mountinfo")
	fstype, src := mountOf(mi, "/tmp/bench dir/mnt/large/00001.bin")
	assert.Equal(t, "fuse.ferry", fstype)
	assert.Equal(t, "s3://ferry-bench", src)
	fstype, src = mountOf(mi, "/tmp/bench dir2")
	assert.Equal(t, "ext4", fstype, "a sibling with a common prefix is not inside the mount")
	assert.Equal(t, "/dev/vda", src)
}
