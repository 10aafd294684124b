package dataset

import (
	"bytes"
	"compress/flate"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var spec = Spec{Seed: 42, Groups: []Group{{Dir: "large", Count: 2, Size: 1 << 20}, {Dir: "small", Count: 3, Size: 1000}}}

func TestFilesAndTotals(t *testing.T) {
	fs := spec.Files()
	require.Len(t, fs, 5)
	assert.Equal(t, "large/00000.bin", fs[0].Name)
	assert.Len(t, spec.Group("small"), 3)
	assert.EqualValues(t, 2<<20+3000, spec.TotalBytes())
}

func TestContentIsSeededAndDistinct(t *testing.T) {
	a, err := spec.Bytes("large/00000.bin", 4096)
	require.NoError(t, err)
	b, err := spec.Bytes("large/00000.bin", 4096)
	require.NoError(t, err)
	assert.Equal(t, a, b, "same seed and name, same bytes")
	c, err := spec.Bytes("large/00001.bin", 4096)
	require.NoError(t, err)
	assert.NotEqual(t, a, c)
	other := Spec{Seed: 43}
	d, err := other.Bytes("large/00000.bin", 4096)
	require.NoError(t, err)
	assert.NotEqual(t, a, d)
}

func TestContentIsIncompressible(t *testing.T) {
	b, err := spec.Bytes("large/00000.bin", 1<<20)
	require.NoError(t, err)
	var out bytes.Buffer
	w, err := flate.NewWriter(&out, flate.BestCompression)
	require.NoError(t, err)
	_, _ = w.Write(b)
	require.NoError(t, w.Close())
	assert.Greater(t, out.Len(), len(b)*99/100)
}

func TestWriteDirAndVerify(t *testing.T) {
	dir := t.TempDir()
	var total int64
	require.NoError(t, spec.WriteDir(dir, func(n int64) { total += n }))
	assert.Equal(t, spec.TotalBytes(), total)
	got, err := os.ReadFile(filepath.Join(dir, "large", "00001.bin"))
	require.NoError(t, err)
	require.NoError(t, spec.Verify("large/00001.bin", 0, got))
	require.NoError(t, spec.Verify("large/00001.bin", 12345, got[12345:20000]))
	got[777] ^= 1
	require.Error(t, spec.Verify("large/00001.bin", 0, got))
	// A rerun keeps files that are already complete.
	st, _ := os.Stat(filepath.Join(dir, "small", "00000.bin"))
	require.NoError(t, spec.WriteDir(dir, nil))
	st2, _ := os.Stat(filepath.Join(dir, "small", "00000.bin"))
	assert.Equal(t, st.ModTime(), st2.ModTime())
}
