package file

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

// listAll lists prefix with delim page by page, max names a page, and
// returns every key (objects and prefixes, in the order given) and the
// number of pages.
func listAll(t *testing.T, b *Bucket, prefix, delim string, max int) (keys []string, pages int) {
	t.Helper()
	token := ""
	for {
		l, err := b.List(t.Context(), &bucket.ListRequest{Prefix: prefix, Delimiter: delim, ContinuationToken: token, MaxResults: max})
		require.NoError(t, err)
		pages++
		page := slices.Clone(l.Prefixes)
		for _, o := range l.Objects {
			page = append(page, o.Name)
		}
		slices.Sort(page) // objects and prefixes come as two sorted lists
		keys = append(keys, page...)
		if l.ContinuationToken == "" {
			return keys, pages
		}
		token = l.ContinuationToken
	}
}

// bigDir makes n files in dir/, and the names that sort around a
// directory's "/" ("x-1" < "x.txt" < "x/" < "x0").
func bigDir(t *testing.T, root, dir string, n int) []string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(root, dir, "x"), 0o755))
	var want []string
	for i := range n {
		name := fmt.Sprintf("f%06d", i)
		require.NoError(t, os.WriteFile(filepath.Join(root, dir, name), nil, 0o644))
		want = append(want, dir+"/"+name)
	}
	for _, name := range []string{"x-1", "x.txt", "x0", "x/in"} {
		require.NoError(t, os.WriteFile(filepath.Join(root, dir, name), []byte("a"), 0o644))
	}
	return want
}

// TestLargeDirectoryIsReadOncePerListing: a directory of 2,500 names
// listed in pages of 100 is read once, not once a page, and lists what
// one page would; the snapshot kept between pages is gone at the end.
func TestLargeDirectoryIsReadOncePerListing(t *testing.T) {
	root := t.TempDir()
	files := bigDir(t, root, "d", 2500)
	b, _ := newBucket(t, root)

	keys, pages := listAll(t, b, "d/", "/", 100)
	want := append(slices.Clone(files), "d/x-1", "d/x.txt", "d/x/", "d/x0")
	slices.Sort(want)
	assert.Equal(t, want, keys)
	assert.Equal(t, 26, pages)
	assert.EqualValues(t, 1, b.dirReads.Load(), "one directory read for %d pages", pages)
	assert.Empty(t, b.snaps, "dropped at the listing's end")

	// Flat, through the sub-directory "x/" in the middle of the pages.
	b.dirReads.Store(0)
	keys, _ = listAll(t, b, "d/", "", 100)
	want = append(slices.Clone(files), "d/x-1", "d/x.txt", "d/x/in", "d/x0")
	slices.Sort(want)
	assert.Equal(t, want, keys)
	assert.LessOrEqual(t, b.dirReads.Load(), uint64(3), "d once, x/ once or twice")
	assert.Empty(t, b.snaps)
}

// TestListingSeesChangesBetweenPages: a name added or removed after the
// first page changes the directory's modification time, so the next page
// reads the directory again and shows the change.
func TestListingSeesChangesBetweenPages(t *testing.T) {
	root := t.TempDir()
	bigDir(t, root, "d", 2100)
	b, _ := newBucket(t, root)
	l, err := b.List(t.Context(), &bucket.ListRequest{Prefix: "d/", Delimiter: "/", MaxResults: 1000})
	require.NoError(t, err)
	require.Len(t, b.snaps, 1, "kept for the next pages")

	// Coarse file system clocks: make sure the change gets a later mtime.
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, os.WriteFile(filepath.Join(root, "d", "f002040a"), nil, 0o644))
	require.NoError(t, os.Remove(filepath.Join(root, "d", "f002050")))
	var rest []string
	for token := l.ContinuationToken; token != ""; token = l.ContinuationToken {
		l, err = b.List(t.Context(), &bucket.ListRequest{Prefix: "d/", Delimiter: "/", MaxResults: 1000, ContinuationToken: token})
		require.NoError(t, err)
		for _, o := range l.Objects {
			rest = append(rest, strings.TrimPrefix(o.Name, "d/"))
		}
	}
	assert.Contains(t, rest, "f002040a")
	assert.NotContains(t, rest, "f002050")
	assert.EqualValues(t, 2, b.dirReads.Load(), "read again once it changed")
}
