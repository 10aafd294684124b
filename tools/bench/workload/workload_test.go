package workload

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeTree(t *testing.T) string {
	root := t.TempDir()
	for _, f := range []struct {
		name string
		size int
	}{{"large/a", 3<<20 + 5}, {"large/b", 1 << 20}, {"small/x", 1000}, {"small/y", 0}, {"small/z", 4096}} {
		p := filepath.Join(root, f.name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, make([]byte, f.size), 0o644))
	}
	return root
}

func TestSequentialReadsEveryByte(t *testing.T) {
	root := writeTree(t)
	var seen atomic.Int64
	for _, streams := range []int{1, 4} {
		seen.Store(0)
		r, err := Sequential(context.Background(), root, []string{"large/a", "large/b"}, streams, 1<<20, func(n int64) { seen.Add(n) })
		require.NoError(t, err)
		assert.EqualValues(t, 4<<20+5, r.Bytes)
		assert.EqualValues(t, 2, r.Ops)
		assert.Equal(t, r.Bytes, seen.Load())
	}
}

func TestSequentialMissingFileFails(t *testing.T) {
	_, err := Sequential(context.Background(), writeTree(t), []string{"nope"}, 1, 4096, nil)
	require.Error(t, err)
}

func TestRandomIsSeededAndBounded(t *testing.T) {
	root := writeTree(t)
	files := []string{"large/a", "large/b"}
	sizes := []int64{3<<20 + 5, 1 << 20}
	r, err := Random(context.Background(), root, files, sizes, 4, 40, 512<<10, 1, nil)
	require.NoError(t, err)
	assert.EqualValues(t, 40, r.Ops)
	assert.EqualValues(t, 40*512<<10, r.Bytes)
}

func TestSmallFilesReadsTheDirectory(t *testing.T) {
	r, err := SmallFiles(context.Background(), writeTree(t), "small", 8, nil)
	require.NoError(t, err)
	assert.EqualValues(t, 3, r.Ops)
	assert.EqualValues(t, 5096, r.Bytes)
}

func TestWalkCountsEntries(t *testing.T) {
	r, err := Walk(context.Background(), writeTree(t), ".")
	require.NoError(t, err)
	assert.EqualValues(t, 8, r.Ops) // root, 2 dirs, 5 files
}

func TestReadSample(t *testing.T) {
	root := writeTree(t)
	n, err := ReadSample(root, "large/a", 1<<20, 2<<20, make([]byte, 256<<10))
	require.NoError(t, err)
	assert.EqualValues(t, 2<<20, n)
	n, err = ReadSample(root, "large/b", 1<<20-10, 100, make([]byte, 64))
	require.NoError(t, err)
	assert.EqualValues(t, 10, n, "clipped at end of file")
}
