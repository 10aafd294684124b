package filecache

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCachedBytes(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, hooks{})
	o := obj("a", 5*testBS+100) // 6 blocks, the last 100 bytes
	assert.Zero(t, s.CachedBytes(o), "nothing cached")
	assert.Zero(t, s.CachedBytes(Key{}))
	assert.Zero(t, s.CachedBytes(obj("empty", 0)))

	// .XX...
	require.Equal(t, 2, s.WriteBlocks(o, 1, blocksData(o, 1, 2, testBS)))
	assert.EqualValues(t, 2*testBS, s.CachedBytes(o))
	// .XX..X: the short last block counts its 100 bytes.
	require.Equal(t, 1, s.WriteBlocks(o, 5, blocksData(o, 5, 1, testBS)))
	assert.EqualValues(t, 2*testBS+100, s.CachedBytes(o))
	// XXXXXX: the whole object.
	require.Equal(t, 6, s.WriteBlocks(o, 0, blocksData(o, 0, 6, testBS)))
	assert.EqualValues(t, o.Size, s.CachedBytes(o))

	// Another version of the same name has nothing cached.
	o2 := o
	o2.Version = "v2"
	assert.Zero(t, s.CachedBytes(o2))

	// Asking is not reading: no hit, no miss.
	st := s.Stats()
	assert.Zero(t, st.HitBlocks+st.MissBlocks)
	s.checkInvariants(t)
}

func TestDrop(t *testing.T) {
	for _, cold := range []bool{false, true} {
		t.Run(fmt.Sprintf("cold=%v", cold), func(t *testing.T) { testDrop(t, cold) })
	}
}

// testDrop drops entries warm, or cold (after a restart: their names are
// in the index only), next to another bucket's entry of the same name.
func testDrop(t *testing.T, cold bool) {
	dir := t.TempDir()
	other := openT(t, Config{Dir: dir, BucketID: "other"}, hooks{})
	oa := obj("train/a", 3*testBS)
	require.Equal(t, 3, other.WriteBlocks(oa, 0, blocksData(oa, 0, 3, testBS)))
	require.NoError(t, other.Close())
	s := openT(t, Config{Dir: dir}, hooks{})
	objs := []string{"train/a", "train/b", "train/sub/c", "trainer", "val/d"}
	for _, name := range objs {
		o := obj(name, 3*testBS)
		require.Equal(t, 3, s.WriteBlocks(o, 0, blocksData(o, 0, 3, testBS)))
	}
	if cold {
		require.NoError(t, s.Close())
		s = openT(t, Config{Dir: dir}, hooks{})
		require.EqualValues(t, 6, s.Stats().ColdEntries)
	}
	before := du(t, dir)

	n, bytes := s.Drop(func(name string) bool { return strings.HasPrefix(name, "train/") })
	assert.Equal(t, 3, n)
	assert.Positive(t, bytes)
	s.checkInvariants(t)
	for _, name := range objs {
		o := obj(name, 3*testBS)
		dropped := strings.HasPrefix(name, "train/")
		assert.Equal(t, !dropped, s.HasBlock(o, 0), name)
		assert.Equal(t, !dropped, readOK(t, s, o, 2), name)
	}
	assert.Equal(t, before-bytes, du(t, dir), "the dropped files are gone from disk")
	assert.EqualValues(t, 3, s.Stats().Evictions)

	// Dropped data can be cached again.
	o := obj("train/a", 3*testBS)
	require.Equal(t, 3, s.WriteBlocks(o, 0, blocksData(o, 0, 3, testBS)))
	assert.True(t, readOK(t, s, o, 0))
	s.checkInvariants(t)

	// The other bucket's train/a was not dropped.
	require.NoError(t, s.Close())
	other = openT(t, Config{Dir: dir, BucketID: "other"}, hooks{})
	assert.True(t, readOK(t, other, oa, 2))
}
