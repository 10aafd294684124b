package fs

import (
	"context"
	"fmt"
	"testing"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pages lists dir whole through one handle in 4 KiB readdirplus reads
// and reports, page by page, whether the page gave attributes (every
// entry has a child) or names only (none has); between pages it calls
// between(i) after page i.
func pages(t *testing.T, fs *fileSystem, dir fuseops.InodeID, between func(i int)) []bool {
	t.Helper()
	var got []bool
	readDirPages(t, fs, dir, 4096, true, func(i int, ds []dirent) {
		with := 0
		for _, d := range ds {
			if d.child != 0 {
				with++
			}
		}
		require.True(t, with == 0 || with == len(ds), "page %d: %d of %d entries with attributes", i, with, len(ds))
		got = append(got, with > 0)
		if between != nil {
			between(i)
		}
	})
	return got
}

// useAll looks up and opens (lookup) or only opens every file of dir,
// as a loader does after a listing, with or without the kernel holding
// the names' dentries.
func useAll(t *testing.T, fs *fileSystem, dir fuseops.InodeID, n int, lookup bool) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		name := fmt.Sprintf("f%03d", i)
		var child fuseops.InodeID
		if lookup {
			e, err := lookUp(fs, dir, name)
			require.NoError(t, err)
			child = e.Child
		} else {
			// The kernel's dentry from the listing: the inode the
			// readdirplus entry handed out (take it without a lookup
			// through ferry's own table).
			fs.mu.Lock()
			path := childPath(fs.inodes[dir].path, name)
			for id, in := range fs.inodes {
				if in.path == path {
					child = id
				}
			}
			fs.mu.Unlock()
			require.NotZero(t, child, name)
		}
		op := &fuseops.OpenFileOp{Inode: child}
		require.NoError(t, fs.OpenFile(ctx, op))
		require.NoError(t, fs.ReleaseFileHandle(ctx, &fuseops.ReleaseFileHandleOp{Handle: op.Handle}))
	}
}

// TestListingAttributes: which readdirplus pages give attributes
// (listuse.go). The first page of a listing always; later pages once a
// child was looked up since the handle's page before, and then to the
// end; every page of the listings that follow a cycle whose files were
// used, until listings go unused for a while.
func TestListingAttributes(t *testing.T) {
	b := newTestBucket()
	const n = 200
	for i := range n {
		b.put(fmt.Sprintf("d/f%03d", i), []byte("x"))
		b.put(fmt.Sprintf("e/f%03d", i), []byte("x"))
	}
	clock := newFakeClock()
	fs := newTestFS(t, b, clock, nil)
	d, err := lookUp(fs, fuseops.RootInodeID, "d")
	require.NoError(t, err)
	e, err := lookUp(fs, fuseops.RootInodeID, "e")
	require.NoError(t, err)
	allWith := func(got []bool, what string) {
		t.Helper()
		for i, with := range got {
			assert.True(t, with, "%s: page %d", what, i)
		}
	}
	namesOnly := func(got []bool, what string) {
		t.Helper()
		require.Greater(t, len(got), 4, what)
		assert.True(t, got[0], "%s: the first page", what)
		for i, with := range got[1:] {
			assert.False(t, with, "%s: page %d", what, i+1)
		}
	}

	// A names-only lister (`ls`, `find`): the first page only, and no
	// inode for the names of the other pages.
	namesOnly(pages(t, fs, d.Child, nil), "names-only listing")
	assert.Less(t, fs.inodeCount(), 3+n/4, "inodes after a names-only listing")

	// A lister that stats what it lists (`ls -l`): from its first lookup
	// on, every page.
	got := pages(t, fs, d.Child, func(i int) {
		if i == 1 {
			_, err := lookUp(fs, d.Child, "f000")
			require.NoError(t, err)
		}
	})
	assert.Equal(t, []bool{true, false}, got[:2])
	allWith(got[2:], "after a lookup")
	// One lookup after a listing is too little use; a failed one does
	// not count.
	for range 100 {
		_, err := lookUp(fs, d.Child, "no-such-name")
		require.Error(t, err)
	}
	namesOnly(pages(t, fs, d.Child, nil), "listing after little use")

	// A loader: it lists, then looks up and opens every file; from then
	// on every page of its listings has attributes, while it opens the
	// files (now without lookups: the kernel has the names), however
	// many listers list it before the files are opened.
	namesOnly(pages(t, fs, e.Child, nil), "loader's first listing")
	useAll(t, fs, e.Child, n, true)
	for epoch := range 3 {
		for lister := range 3 {
			allWith(pages(t, fs, e.Child, nil), fmt.Sprintf("epoch %d, lister %d", epoch+2, lister))
		}
		useAll(t, fs, e.Child, n, false)
	}
	// Listings that nobody uses any more keep attributes for a while:
	// unusedListings listings and unusedAge.
	for i := range unusedListings {
		allWith(pages(t, fs, e.Child, nil), fmt.Sprintf("unused listing %d", i))
	}
	clock.Advance(unusedAge)
	namesOnly(pages(t, fs, e.Child, nil), "after unused listings")
	namesOnly(pages(t, fs, e.Child, nil), "and after that")
	fs.checkInvariants()
}
