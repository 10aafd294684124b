package file

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

// TestPlainNamesOpenInOneCall: an object with no symbolic link on its way
// is opened the short way (one openat2); one reached through a link, or
// a name that is not a readable object, takes the long way and gets the
// answers it always got.
func TestPlainNamesOpenInOneCall(t *testing.T) {
	root, _ := linkTree(t)
	b, err := New(Config{Dir: root})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	if b.plain.dir == nil {
		t.Skip("the root could not be opened for openat2")
	}
	read := func(name string) (string, error) {
		got, err := readAll(t, b, &bucket.ReadRequest{Name: name, Range: bucket.ByteRange{Limit: 100}})
		return string(got), err
	}

	got, err := read("data/sub/inner.txt")
	require.NoError(t, err)
	assert.Equal(t, "inner", got)
	if b.plain.off.Load() {
		t.Skip("no openat2 on this kernel")
	}
	assert.Equal(t, uint64(1), b.plain.opened.Load(), "a name without links: the short way")

	got, err = read("dirlink/inner.txt")
	require.NoError(t, err)
	assert.Equal(t, "inner", got, "through a link to a directory")
	got, err = read("chain")
	require.NoError(t, err)
	assert.Equal(t, "real bytes", got, "through two links")
	for _, name := range []string{"outside", "absout", "data/up/alias", "a/l1/l2/l1/x", "data/sub", "data/missing"} {
		_, err := read(name)
		assert.ErrorIs(t, err, bucket.ErrNotFound, name)
	}
	assert.Equal(t, uint64(2), b.plain.opened.Load(), "only the directory data/sub opened the short way, and refused as not a file")
}

// BenchmarkReadSmallObject reads a 512 B object three directories deep
// whole, as a cold small-file read does: the short way (openat2) and the
// long way (links.go, then os.Root).
func BenchmarkReadSmallObject(b *testing.B) {
	root := b.TempDir()
	name := "train/n00042/n00042_7.JPEG"
	require.NoError(b, os.MkdirAll(filepath.Join(root, "train/n00042"), 0o755))
	require.NoError(b, os.WriteFile(filepath.Join(root, name), make([]byte, 512), 0o644))
	for _, short := range []bool{true, false} {
		b.Run(fmt.Sprintf("short=%v", short), func(b *testing.B) {
			bk, err := New(Config{Dir: root})
			require.NoError(b, err)
			defer bk.Close()
			bk.plain.off.Store(!short)
			buf := make([]byte, 512)
			for b.Loop() {
				rc, err := bk.NewRangeReader(b.Context(), &bucket.ReadRequest{Name: name, Range: bucket.ByteRange{Limit: 512}})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(rc, buf); err != nil {
					b.Fatal(err)
				}
				rc.Close()
			}
		})
	}
}
