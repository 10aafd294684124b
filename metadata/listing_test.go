package metadata

import (
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket/mem"
)

// TestListerPacksAsItReads: a listing of a flat directory of 100,000
// names holds about what its packed form does while it is still being
// read (a reader of a prefix of a million objects part way through), not
// a DirEntry and a map slot a name; its entries are the store's.
func TestListerPacksAsItReads(t *testing.T) {
	const n = 100_000
	b := flatBucket(t, n)
	c := newTestCache(t, b, nil, func(cfg *Config) { cfg.PageSize = 1000 })
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	l := c.NewLister("flat")
	for l.Len() < n-1000 {
		require.NoError(t, c.NextPage(context.Background(), l))
	}
	require.False(t, l.Complete)
	held := heap() - before
	t.Logf("%d names read: %d bytes a name", l.Len(), held/int64(l.Len()))
	assert.Less(t, held/int64(l.Len()), int64(110), "bytes a name while the listing is read")
	for _, i := range []int{0, 4321, l.Len() - 1} {
		e := l.At(i)
		assert.Equal(t, fmt.Sprintf("n01440764_%07d.JPEG", i), e.Name)
		assert.Equal(t, "flat/"+e.Name, e.Obj.Name)
		assert.True(t, l.Settled(i) || i == l.Len()-1)
	}
	runtime.KeepAlive(l)
}

// TestListingBuilderHashCollision: a name whose hash an earlier name has
// is still found, and told apart from that name.
func TestListingBuilderHashCollision(t *testing.T) {
	var lb listingBuilder
	require.True(t, lb.add(DirEntry{Name: "a", Entry: Entry{Kind: File}}))
	// Make "b" collide with "a": its hash now points at "a"'s entry.
	lb.index[maphash.String(lb.seed, "b")] = 0
	require.True(t, lb.add(DirEntry{Name: "b", Entry: Entry{Kind: File}}))
	require.True(t, lb.add(DirEntry{Name: "b", Entry: Entry{Kind: Dir}}), "b again, as a directory")
	i, ok := lb.find("a")
	assert.True(t, ok)
	assert.Equal(t, 0, i)
	i, ok = lb.find("b")
	assert.True(t, ok)
	assert.Equal(t, 1, i)
	assert.Len(t, lb.ents, 2, "each name once")
	assert.Equal(t, Dir, lb.ents[1].kind, "the directory wins, in place")
	_, ok = lb.find("c")
	assert.False(t, ok)
}

// flatBucket is a bucket of n empty objects in one directory, flat/.
func flatBucket(t *testing.T, n int) *mem.Bucket {
	t.Helper()
	b := mem.New("b")
	for i := range n {
		put(t, b, fmt.Sprintf("flat/n01440764_%07d.JPEG", i), "")
	}
	return b
}
