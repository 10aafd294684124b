package metadata

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1800000000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestMetaCacheTTL(t *testing.T) {
	clock := newFakeClock()
	file := Entry{Kind: File, Obj: bucket.Object{Name: "d/f", Version: "1"}}

	t.Run("positive and negative expire separately", func(t *testing.T) {
		c := newTTLCache(time.Minute, time.Second, clock.Now, 0)
		c.put("d/f", file)
		c.put("d/missing", Entry{Kind: None})
		e, ok := c.lookup("d/f")
		require.True(t, ok)
		assert.Equal(t, file.Obj, e.Obj)
		_, ok = c.lookup("d/missing")
		require.True(t, ok)
		clock.Advance(2 * time.Second)
		_, ok = c.lookup("d/missing")
		assert.False(t, ok, "negative entry outlived NegativeTTL")
		_, ok = c.lookup("d/f")
		assert.True(t, ok)
		clock.Advance(time.Minute)
		_, ok = c.lookup("d/f")
		assert.False(t, ok)
	})
	t.Run("forever", func(t *testing.T) {
		c := newTTLCache(-1, -1, clock.Now, 0)
		c.put("d/f", file)
		c.put("d/missing", Entry{Kind: None})
		putEntries(t, c, "d", []DirEntry{{Name: "f", Entry: file}}, c.begin())
		clock.Advance(100 * 365 * 24 * time.Hour)
		_, ok := c.lookup("d/f")
		assert.True(t, ok)
		_, ok = c.lookup("d/missing")
		assert.True(t, ok)
		_, ok = c.listing("d")
		assert.True(t, ok)
	})
	t.Run("disabled", func(t *testing.T) {
		c := newTTLCache(0, 0, clock.Now, 0)
		c.put("d/f", file)
		c.put("d/missing", Entry{Kind: None})
		putEntries(t, c, "d", []DirEntry{{Name: "f", Entry: file}}, c.begin())
		_, ok := c.lookup("d/f")
		assert.False(t, ok)
		_, ok = c.lookup("d/missing")
		assert.False(t, ok)
		_, ok = c.listing("d")
		assert.False(t, ok)
	})
	t.Run("listing answers children, newer wins", func(t *testing.T) {
		c := newTTLCache(time.Minute, time.Minute, clock.Now, 0)
		c.put("d/new", Entry{Kind: None}) // older than the listing
		putEntries(t, c, "d", []DirEntry{{Name: "f", Entry: file}, {Name: "new", Entry: Entry{Kind: Dir}}}, c.begin())
		e, ok := c.lookup("d/new")
		require.True(t, ok)
		assert.Equal(t, Dir, e.Kind, "an older negative entry shadowed the listing")
		e, ok = c.lookup("d/other")
		require.True(t, ok)
		assert.Equal(t, None, e.Kind, "a complete listing proves absence")
		c.put("d/f", Entry{Kind: None}) // newer than the listing
		e, ok = c.lookup("d/f")
		require.True(t, ok)
		assert.Equal(t, None, e.Kind)
	})
	t.Run("the request that began later wins, not the one stored later", func(t *testing.T) {
		c := newTTLCache(time.Minute, time.Minute, clock.Now, 0)
		listed := c.begin() // a listing is asked for ...
		v1 := Entry{Kind: File, Obj: bucket.Object{Name: "d/g", Version: "1"}, Seq: listed}
		c.put("d/g", Entry{Kind: File, Obj: bucket.Object{Name: "d/g", Version: "2"}}) // ... a Stat sees v2 ...
		c.put("d/h", Entry{Kind: File, Obj: bucket.Object{Name: "d/h", Version: "1"}}) // ... and a new file ...
		clock.Advance(30 * time.Second)
		putEntries(t, c, "d", []DirEntry{{Name: "g", Entry: v1}}, listed) // ... then the listing lands
		e, ok := c.lookup("d/g")
		require.True(t, ok)
		assert.Equal(t, "2", e.Obj.Version)
		e, ok = c.lookup("d/h")
		require.True(t, ok)
		assert.Equal(t, File, e.Kind)
		c.put("d/g", v1) // a late answer of an earlier request
		e, _ = c.lookup("d/g")
		assert.Equal(t, "2", e.Obj.Version)
		// The name entries expire before the listing: the listing, older,
		// still cannot answer for those names (ask the store again).
		clock.Advance(45 * time.Second)
		_, ok = c.lookup("d/g")
		assert.False(t, ok)
		_, ok = c.lookup("d/h")
		assert.False(t, ok)
		for range 5000 { // sweeps run now and then; they keep such entries
			c.put("x/y", Entry{Kind: None})
		}
		_, ok = c.lookup("d/h")
		assert.False(t, ok)
		e, _ = c.newest("d/g", 0)
		assert.Equal(t, "2", e.Obj.Version, "in an outage, too, the newer answer")
	})
}

// --negative-ttl 0: negative lookups in a directory whose listing has
// expired (but is not swept) must not pile up tombstones.
func TestTombstonesAreSwept(t *testing.T) {
	clock := newFakeClock()
	c := newTTLCache(time.Minute, 0, clock.Now, 0)
	putEntries(t, c, "d", []DirEntry{{Name: "a", Entry: Entry{Kind: File}}}, c.begin())
	clock.Advance(2 * time.Minute) // listing expired
	for i := 0; i < 200_000; i++ {
		c.put(fmt.Sprintf("d/missing-%d", i), Entry{Kind: None, Seq: c.begin()})
		clock.Advance(time.Millisecond)
	}
	c.mu.Lock()
	n := len(c.entries)
	c.mu.Unlock()
	require.Less(t, n, 20_000, "expired tombstones are never swept")
}

// benchPut times metadata puts after floors invalidations that no
// request in flight predates (they must cost nothing).
func benchPut(b *testing.B, floors int) {
	clock := newFakeClock()
	c := newTTLCache(time.Minute, time.Minute, clock.Now, 0)
	for i := 0; i < floors; i++ {
		c.invalidate(fmt.Sprintf("datasets/train/shard-%05d/part-%05d.tar", i, i))
	}
	names := make([]string, 4096)
	for i := range names {
		names[i] = fmt.Sprintf("datasets/train/shard-%05d/sample-%07d.jpg", i%50, i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.put(names[i%len(names)], Entry{Kind: File, Seq: c.begin()})
	}
}

func BenchmarkMetaCachePut(b *testing.B)                   { benchPut(b, 0) }
func BenchmarkMetaCachePutAfterInvalidations(b *testing.B) { benchPut(b, 1000) }

// A listing's "no such name" answers follow the negative TTL: a name
// created after the listing is found once it has run out, with a
// forever TTL too; -1 keeps them forever, 0 never gives them.
func TestListingNegativeAnswersFollowNegativeTTL(t *testing.T) {
	file := Entry{Kind: File, Obj: bucket.Object{Name: "d/f", Version: "1"}}
	for _, tc := range []struct{ negTTL time.Duration }{
		{negTTL: 5 * time.Second},
		{negTTL: -1},
		{negTTL: 0},
	} {
		clock := newFakeClock()
		c := newTTLCache(-1, tc.negTTL, clock.Now, 0)
		putEntries(t, c, "d", []DirEntry{{Name: "f", Entry: file}}, c.begin())
		e, ok := c.lookup("d/new")
		assert.Equal(t, tc.negTTL != 0, ok, "negative TTL %v, at once", tc.negTTL)
		assert.Equal(t, None, e.Kind)
		clock.Advance(4 * time.Second)
		_, ok = c.lookup("d/new")
		assert.Equal(t, tc.negTTL != 0, ok, "negative TTL %v, 4 s on", tc.negTTL)
		clock.Advance(2 * time.Second)
		_, ok = c.lookup("d/new")
		assert.Equal(t, tc.negTTL < 0, ok, "negative TTL %v, 6 s on", tc.negTTL)
		_, ok = c.lookup("d/f")
		assert.True(t, ok, "the names it holds follow the TTL (forever)")
	}
}

// stale makes the next lookup of a name ask the store, keeps the listing
// for its other names, and keeps the old answer as the newest known.
func TestStaleName(t *testing.T) {
	clock := newFakeClock()
	c := newTTLCache(-1, -1, clock.Now, 0)
	v1 := Entry{Kind: File, Obj: bucket.Object{Name: "d/f", Version: "1"}}
	g := Entry{Kind: File, Obj: bucket.Object{Name: "d/g", Version: "1"}}
	putEntries(t, c, "d", []DirEntry{{Name: "f", Entry: v1}, {Name: "g", Entry: g}}, c.begin())
	c.stale("d/f")
	_, ok := c.lookup("d/f")
	assert.False(t, ok, "asks the store again")
	_, ok = c.lookup("d/g")
	assert.True(t, ok, "the listing answers for the others")
	_, ok = c.listing("d")
	assert.True(t, ok)
	e, ok := c.newest("d/f", 0)
	require.True(t, ok)
	assert.Equal(t, "1", e.Obj.Version, "the old answer, for an outage")

	v2 := Entry{Kind: File, Obj: bucket.Object{Name: "d/f", Version: "2"}, Seq: c.begin()}
	c.put("d/f", v2)
	e, ok = c.lookup("d/f")
	require.True(t, ok)
	assert.Equal(t, "2", e.Obj.Version)
	c.stale("x/unknown")
	_, ok = c.newest("x/unknown", 0)
	assert.False(t, ok, "nothing known, nothing kept")
}

// putEntries caches a listing of dir made of entries, begun at seq.
func putEntries(t *testing.T, c *ttlCache, dir string, entries []DirEntry, seq uint64) {
	t.Helper()
	l, ok := newListing(dir, entries, seq)
	require.True(t, ok)
	c.putListing(l)
}
