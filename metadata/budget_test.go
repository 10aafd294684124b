package metadata

import (
	"context"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/mem"
)

// TestListingPacksEntries: a packed listing gives back every entry as it
// was given (files with their objects, directories), finds each name and
// no other, and costs well under 100 bytes a name for ImageNet's names.
func TestListingPacksEntries(t *testing.T) {
	when := time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC)
	var entries []DirEntry
	for i := range 1300 {
		name := fmt.Sprintf("n01440764_%d.JPEG", 10000+i)
		obj := bucket.Object{Name: "train/n01440764/" + name, Size: uint64(100000 + i),
			Version: fmt.Sprint(1733000000000000 + i), Updated: when, CRC32C: uint32(i), HasCRC32C: i%2 == 0}
		entries = append(entries, DirEntry{Name: name, Entry: Entry{Kind: File, Obj: obj, Seq: 7}})
	}
	entries = append(entries,
		DirEntry{Name: "sub", Entry: Entry{Kind: Dir, Seq: 7}},
		DirEntry{Name: "a-zero-time", Entry: Entry{Kind: File, Obj: bucket.Object{Name: "train/n01440764/a-zero-time"}, Seq: 7}})
	l, ok := newListing("train/n01440764", entries, 7)
	require.True(t, ok)
	require.Equal(t, len(entries), l.Len())
	for i, want := range entries {
		assert.Equal(t, want, l.At(i), "entry %d", i)
		j, found := l.Index(want.Name)
		assert.True(t, found)
		assert.Equal(t, i, j)
		assert.Equal(t, want.Kind == File, l.IsFile(i))
	}
	for _, missing := range []string{"", "n01440764", "n01440764_9999.JPEG", "zzz", "sub/"} {
		_, found := l.Index(missing)
		assert.False(t, found, missing)
	}
	assert.Equal(t, Entry{Kind: None, Seq: 7}, l.answer("nope"))
	perName := l.bytes() / int64(l.Len())
	assert.Less(t, perName, int64(100), "bytes a name")
	t.Logf("%d bytes a name", perName)
}

// TestListingEntriesDoNotPinTheListing: an object handed out by a listing
// shares no memory with the listing's text, in a directory and at the
// root: an inode keeps its object, and must not keep the listing, and
// every later copy of it, alive (50,000 inodes of evicted and re-read
// 1,000-name listings once held 316 MB of listing text).
func TestListingEntriesDoNotPinTheListing(t *testing.T) {
	for _, dir := range []string{"train/n01440764", ""} {
		entries := []DirEntry{{Name: "a.JPEG", Entry: Entry{Kind: File,
			Obj: bucket.Object{Name: ChildPath(dir, "a.JPEG"), Version: "1733000000000000"}}}}
		l, ok := newListing(dir, entries, 1)
		require.True(t, ok)
		text := unsafe.StringData(l.text)
		inText := func(s string) bool {
			p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
			return p >= uintptr(unsafe.Pointer(text)) && p < uintptr(unsafe.Pointer(text))+uintptr(len(l.text))
		}
		e := l.At(0)
		assert.Equal(t, entries[0].Obj, e.Obj)
		assert.False(t, inText(e.Obj.Name), "%q: the object's name is its own", dir)
		assert.False(t, inText(e.Obj.Version), "%q: the object's version is its own", dir)
	}
}

// TestMemoryLimitBoundsTheCache: names resolved past the limit push
// others out, at random; Bytes stays within the limit, an evicted name is
// asked of the store again (even with a TTL of -1) and resolves right.
// (Two requests a name: Stat, and a List for a directory of that name.)
func TestMemoryLimitBoundsTheCache(t *testing.T) {
	b := mem.New("b")
	const n = 2000
	for i := range n {
		put(t, b, fmt.Sprintf("d%d/f%04d", i%10, i), "x")
	}
	const limit = 64 << 10
	c := newTestCache(t, b, nil, func(cfg *Config) { cfg.TTL, cfg.NegativeTTL, cfg.MemoryLimit = -1, -1, limit })
	ctx := context.Background()
	resolveAll := func() {
		for i := range n {
			p := fmt.Sprintf("d%d/f%04d", i%10, i)
			e, err := c.Resolve(ctx, p)
			require.NoError(t, err)
			require.Equal(t, p, e.Obj.Name)
			require.LessOrEqual(t, c.Bytes(), int64(limit))
		}
	}
	resolveAll()
	assert.Positive(t, c.Evictions())
	first := requests(b)
	assert.EqualValues(t, 2*n, first)

	resolveAll() // again: the names evicted are asked again, once
	again := requests(b) - first
	assert.Positive(t, again)
	assert.LessOrEqual(t, again, first)
	t.Logf("second pass: %d requests for %d names, %d bytes held", again, n, c.Bytes())
}

// TestChargeMakesRoom: bytes held for the kernel's names push the cache's
// own entries out, but never below a quarter of the limit.
func TestChargeMakesRoom(t *testing.T) {
	c := newTTLCache(-1, -1, time.Now, 100<<10)
	for i := range 2000 {
		c.put(fmt.Sprintf("d/f%04d", i), Entry{Kind: File, Obj: bucket.Object{Name: fmt.Sprintf("d/f%04d", i)}})
	}
	full := c.budget.used
	assert.LessOrEqual(t, full, int64(100<<10))
	c.budget.external.Add(40 << 10)
	c.put("d/one-more", Entry{Kind: None})
	assert.LessOrEqual(t, c.budget.used, int64(100<<10)-40<<10)
	c.budget.external.Add(1 << 20) // counted up to half the limit
	c.put("d/and-another", Entry{Kind: None})
	assert.GreaterOrEqual(t, c.budget.used, int64(100<<10)/4-entryOverhead*2)
}

// TestLargeListingIsNotCached: a listing bigger than a quarter of the
// limit is served to its reader but not kept.
func TestLargeListingIsNotCached(t *testing.T) {
	b := mem.New("b")
	for i := range 600 {
		put(t, b, fmt.Sprintf("big/f%04d", i), "x")
	}
	c := newTestCache(t, b, nil, func(cfg *Config) { cfg.MemoryLimit = 64 << 10 })
	l := c.NewLister("big")
	for !l.Complete {
		require.NoError(t, c.NextPage(context.Background(), l))
	}
	assert.Equal(t, 600, l.Len())
	assert.Equal(t, "f0599", l.At(599).Name)
	_, ok := c.Listing("big")
	assert.False(t, ok, "600 names take more than 16 KiB")
}

// TestEvictedEntryTakesItsListing: a name entry that answers in place of
// its directory's listing (the store proved the listed version gone)
// cannot be evicted alone, or the listing would answer with the old
// version again.
func TestEvictedEntryTakesItsListing(t *testing.T) {
	c := newTTLCache(-1, -1, time.Now, 0)
	v1 := Entry{Kind: File, Obj: bucket.Object{Name: "d/f", Version: "1"}}
	putEntries(t, c, "d", []DirEntry{{Name: "f", Entry: v1}}, c.begin())
	c.stale("d/f")
	_, fresh := c.lookup("d/f")
	require.False(t, fresh, "stale")

	c.mu.Lock()
	c.budget.limit = c.listings["d"].bytes() * 8 / 7 // room for the listing alone
	c.evictLocked()
	c.mu.Unlock()
	e, fresh := c.lookup("d/f")
	assert.False(t, fresh, "the listing must not answer %v again", e)
	assert.Empty(t, c.listings)
}

// TestChargeAloneMakesRoom: names the kernel takes after the cache filled
// push its entries out at once, not only at the cache's next put, so a
// mount whose listings are all cached still keeps to the limit.
func TestChargeAloneMakesRoom(t *testing.T) {
	const limit = 100 << 10
	c := newTestCache(t, mem.New("b"), nil, func(cfg *Config) { cfg.MemoryLimit = limit })
	for i := range 2000 {
		c.cache.put(fmt.Sprintf("d/f%04d", i), Entry{Kind: File, Obj: bucket.Object{Name: fmt.Sprintf("d/f%04d", i)}})
	}
	require.Greater(t, c.Bytes(), int64(limit)*3/4, "the cache filled")
	c.Charge(40 << 10)
	assert.LessOrEqual(t, c.Bytes(), int64(limit), "entries and charge within the limit")
	assert.Positive(t, c.Evictions())
	c.Charge(-40 << 10)
	assert.LessOrEqual(t, c.Bytes(), int64(limit)-40<<10)
}
