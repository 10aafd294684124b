package fs

import (
	"context"
	"fmt"
	"testing"

	"ferry/metadata"

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
			path := metadata.ChildPath(fs.inodes[dir].path, name)
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

// twoDirs is a bucket with directories d and e of n one-byte files each,
// f000 on.
func twoDirs(n int) *testBucket {
	b := newTestBucket()
	for i := range n {
		b.put(fmt.Sprintf("d/f%03d", i), []byte("x"))
		b.put(fmt.Sprintf("e/f%03d", i), []byte("x"))
	}
	return b
}

// TestListingAttributes: which readdirplus pages give attributes
// (listuse.go). The first page of a listing always; later pages once a
// child was looked up since the handle's page before, and then to the
// end; every page of the listings that follow a cycle whose files were
// used, until listings go unused for a while.
func TestListingAttributes(t *testing.T) {
	const n = 200
	b := twoDirs(n)
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
	// Listers one after the other while the files are opened fall in
	// one cycle: the second, after one open, still has attributes.
	allWith(pages(t, fs, e.Child, nil), "lister A")
	useAll(t, fs, e.Child, 1, false)
	allWith(pages(t, fs, e.Child, nil), "lister B, after A opened a file")

	// Listings that nobody uses any more keep attributes for a while:
	// unusedListings listings and unusedAge, both.
	useAll(t, fs, e.Child, n, false)
	for i := range unusedListings + 1 {
		allWith(pages(t, fs, e.Child, nil), fmt.Sprintf("unused listing %d", i))
	}
	clock.Advance(unusedAge)
	namesOnly(pages(t, fs, e.Child, nil), "after unused listings")
	namesOnly(pages(t, fs, e.Child, nil), "and after that")
	useAll(t, fs, e.Child, n, true)
	allWith(pages(t, fs, e.Child, nil), "used again")
	clock.Advance(2 * unusedAge)
	allWith(pages(t, fs, e.Child, nil), "a while later, few listings")
	fs.checkInvariants()
}

// TestListingAttributesShardedLoader: a loader that opens a share of a
// directory's files each epoch (one node of several) gets attributes
// once its opens add up to a quarter of the entries, and keeps them: it
// does not flip between the two answers from one epoch to the next,
// although a names-only listing costs it a lookup and an open per file
// and one with attributes only the open.
func TestListingAttributesShardedLoader(t *testing.T) {
	const n = 200
	b := twoDirs(n)
	fs := newTestFS(t, b, newFakeClock(), nil)
	for _, tc := range []struct {
		dir    string
		share  int // files opened per epoch
		epochs int // epochs before the listings have attributes
	}{{"d", n / 5, 2}, {"e", n / 3, 1}} {
		dir, err := lookUp(fs, fuseops.RootInodeID, tc.dir)
		require.NoError(t, err)
		with := pages(t, fs, dir.Child, nil)[1]
		for epoch := range 6 {
			// With attributes the kernel holds the names: opens only.
			useAll(t, fs, dir.Child, tc.share, !with)
			got := pages(t, fs, dir.Child, nil)
			with = got[1]
			require.Equal(t, epoch+1 >= tc.epochs, with, "%s, %d of %d files opened an epoch, after epoch %d", tc.dir, tc.share, n, epoch)
		}
	}
}

// TestListingAttributesForgotten: a directory's record forgotten while a
// handle lists it (more than dirsTracked directories listed since) does
// not count as a lookup since the handle's page before.
func TestListingAttributesForgotten(t *testing.T) {
	b := newTestBucket()
	for i := range 200 {
		b.put(fmt.Sprintf("d/f%03d", i), []byte("x"))
	}
	b.put("e/x", nil)
	b.put("f/x", nil)
	fs := newTestFS(t, b, newFakeClock(), nil)
	fs.lu.limit = 2
	ctx := context.Background()
	d, err := lookUp(fs, fuseops.RootInodeID, "d")
	require.NoError(t, err)
	pages(t, fs, d.Child, nil)
	_, err = lookUp(fs, d.Child, "f000") // d's record counts a lookup
	require.NoError(t, err)

	got := []bool{}
	readDirPages(t, fs, d.Child, 4096, true, func(i int, ds []dirent) {
		got = append(got, ds[0].child != 0)
		if i == 0 {
			// Two more directories listed: the records are forgotten.
			for _, name := range []string{"e", "f"} {
				x, err := lookUp(fs, fuseops.RootInodeID, name)
				require.NoError(t, err)
				readDir(t, fs, x.Child, 4096, true)
				require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: x.Child, N: 2}))
			}
		}
	})
	require.Greater(t, len(got), 2)
	assert.Equal(t, []bool{true, false}, got[:2], "the page after the records were forgotten")
}
