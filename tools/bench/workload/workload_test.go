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

func TestRecordLayoutIsAnEpochSample(t *testing.T) {
	sizes := []int64{10<<20 + 3, 4 << 20, 100}
	const rec = 512 << 10
	all := RecordLayout(sizes, rec, 1000, 7)
	// File 0 holds 19 or 20 records after its offset, file 1 7 or 8, file 2 none.
	assert.GreaterOrEqual(t, len(all), 19+7)
	assert.LessOrEqual(t, len(all), 20+8)
	seen := map[Record]bool{}
	perFile := map[int][]int64{}
	for _, r := range all {
		require.False(t, seen[r], "record %+v twice", r)
		seen[r] = true
		require.NotEqual(t, 2, r.File, "a file smaller than a record has none")
		require.LessOrEqual(t, r.Offset+r.Size, sizes[r.File])
		perFile[r.File] = append(perFile[r.File], r.Offset)
	}
	// Records of a file do not overlap: offsets differ by whole records.
	for f, offs := range perFile {
		for _, o := range offs {
			assert.Zero(t, (o-offs[0])%rec, "file %d", f)
		}
	}
	assert.Equal(t, all, RecordLayout(sizes, rec, 1000, 7), "seeded")
	assert.Len(t, RecordLayout(sizes, rec, 5, 7), 5)
	assert.NotEqual(t, all, RecordLayout(sizes, rec, 1000, 8))
}

func TestRecordsReadsEachRecordOnce(t *testing.T) {
	root := writeTree(t)
	files := []string{"large/a", "large/b"}
	recs := RecordLayout([]int64{3<<20 + 5, 1 << 20}, 256<<10, 100, 3)
	var seen atomic.Int64
	r, err := Records(context.Background(), root, files, recs, 4, func(n int64) { seen.Add(n) })
	require.NoError(t, err)
	assert.EqualValues(t, len(recs), r.Ops)
	assert.EqualValues(t, int64(len(recs))*256<<10, r.Bytes)
	assert.Equal(t, r.Bytes, seen.Load())

	_, err = Records(context.Background(), root, files, []Record{{File: 1, Offset: 1<<20 - 10, Size: 100}}, 1, nil)
	assert.Error(t, err, "a record past the end is a short read")
}

func TestListLongCountsEntries(t *testing.T) {
	r, err := ListLong(context.Background(), writeTree(t), "small")
	require.NoError(t, err)
	assert.EqualValues(t, 5, r.Ops) // the "DIR:" header, "total N" and three files
}

func TestShuffledReadsEveryFileOnce(t *testing.T) {
	root := writeTree(t)
	files := []string{"large/a", "large/b", "small/x", "small/y", "small/z"}
	var seen atomic.Int64
	r, err := Shuffled(context.Background(), root, files, 3, 7, func(n int64) { seen.Add(n) })
	require.NoError(t, err)
	assert.Equal(t, int64(5), r.Ops)
	assert.Equal(t, int64(3<<20+5+1<<20+1000+4096), r.Bytes)
	assert.Equal(t, r.Bytes, seen.Load())

	_, err = Shuffled(context.Background(), root, append(files, "small/missing"), 2, 7, nil)
	assert.Error(t, err)
}

func TestCountLinesCountsFindOutput(t *testing.T) {
	root := writeTree(t)
	r, err := CountLines(context.Background(), "find", root)
	require.NoError(t, err)
	assert.Equal(t, int64(8), r.Ops, "root, two directories, five files")

	_, err = CountLines(context.Background(), "find", filepath.Join(root, "nope"))
	assert.Error(t, err)
}
