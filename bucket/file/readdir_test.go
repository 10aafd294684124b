package file

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadDirGivesNamesAndTypes: readDir lists what os.ReadDir does, with
// the same types, over more names than one read of the directory holds.
func TestReadDirGivesNamesAndTypes(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, os.Symlink("sub", filepath.Join(dir, "link")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	for i := range 3000 {
		name := fmt.Sprintf("%s-%04d.JPEG", strings.Repeat("n", 40), i)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o644))
	}
	b, err := New(Config{Dir: dir})
	require.NoError(t, err)
	defer b.Close()
	f, err := b.root.Open(".")
	require.NoError(t, err)
	defer f.Close()
	got, err := b.readDir(f, "")
	require.NoError(t, err)
	want, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, got, len(want))
	slices.SortFunc(got, func(a, b dirent) int { return strings.Compare(a.name, b.name) })
	for i, w := range want {
		assert.Equal(t, w.Name(), got[i].name)
		assert.Equal(t, w.Type(), got[i].typ, w.Name())
	}
}

// TestParseDirentsRefusesGarbage: a record that does not fit is an
// error, not a read past the buffer; an unknown type asks for a stat.
func TestParseDirentsRefusesGarbage(t *testing.T) {
	_, err := parseDirents([]byte{1, 2, 3}, nil)
	assert.Error(t, err)
	rec := make([]byte, 24)
	rec[16] = 200 // reclen past the buffer
	_, err = parseDirents(rec, nil)
	assert.Error(t, err)
	rec[16], rec[18], rec[19] = 24, syscall.DT_UNKNOWN, 'x'
	out, err := parseDirents(rec, nil)
	require.NoError(t, err)
	assert.Equal(t, []dirent{{name: "x", typ: fs.ModeIrregular}}, out)
}
