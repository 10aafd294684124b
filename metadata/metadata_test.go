package metadata

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/mem"
)

// newTestCache is a Cache over b with a minute's TTLs, nothing listed in
// the background, and the clock given (nil: the real one); mutate may
// change the config first.
func newTestCache(t *testing.T, b bucket.Bucket, clock *fakeClock, mutate func(*Config)) *Cache {
	t.Helper()
	cfg := Config{Bucket: b, TTL: time.Minute, NegativeTTL: time.Minute, ListAfterMisses: -1}
	if clock != nil {
		cfg.Now = clock.Now
	}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func put(t *testing.T, b *mem.Bucket, name, data string) bucket.Object {
	t.Helper()
	o, err := b.Put(context.Background(), &bucket.PutRequest{Name: name, Data: []byte(data)})
	require.NoError(t, err)
	return *o
}

func requests(b *mem.Bucket) int64 {
	s := b.Stats()
	return s.Stats + s.Lists + s.Reads
}

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"with space", true},
		{"ünïcødé", true},
		{"100%", true},
		{"...", true},
		{".hidden", true},
		{strings.Repeat("x", 255), true},
		{"", false},
		{".", false},
		{"..", false},
		{"a\x00b", false},
		{"a/b", false},
		{strings.Repeat("x", 256), false},
	} {
		assert.Equal(t, tc.ok, ValidName(tc.name), "%q", tc.name)
	}
}

// Resolve tells files, directories (prefixes and markers) and nothing
// apart; a directory hides a file of the same name.
func TestResolveKinds(t *testing.T) {
	b := mem.New("b")
	top := put(t, b, "top.txt", "hello")
	put(t, b, "implicit/deep/f", "x")
	put(t, b, "marker/", "")
	put(t, b, "both", "file")
	put(t, b, "both/x", "under")
	c := newTestCache(t, b, nil, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		path string
		want Kind
	}{
		{"top.txt", File}, {"implicit", Dir}, {"implicit/deep", Dir}, {"marker", Dir},
		{"both", Dir}, {"missing", None},
	} {
		e, err := c.Resolve(ctx, tc.path)
		require.NoError(t, err, tc.path)
		assert.Equal(t, tc.want, e.Kind, tc.path)
	}
	e, err := c.Resolve(ctx, "top.txt")
	require.NoError(t, err)
	assert.Equal(t, top.Version, e.Obj.Version)
	before := requests(b)
	_, err = c.Resolve(ctx, "missing")
	require.NoError(t, err)
	assert.Equal(t, before, requests(b), "a negative answer is cached")
}

// Concurrent resolves of one name share one fetch; one whose caller gives
// up returns at once while the fetch goes on for the others.
func TestResolveSharesOneFetch(t *testing.T) {
	b := mem.New("b")
	put(t, b, "f", "x")
	gate := make(chan struct{})
	b.SetFaults(mem.Faults{Stat: func(context.Context, *bucket.StatRequest) error {
		<-gate
		return nil
	}})
	c := newTestCache(t, b, newFakeClock(), nil)

	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := c.Resolve(ctx, "f")
		gaveUp <- err
	}()
	for b.Stats().Stats == 0 {
		time.Sleep(time.Millisecond)
	}
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { _, errs[i] = c.Resolve(context.Background(), "f") })
	}
	cancel()
	select {
	case err := <-gaveUp:
		assert.ErrorIs(t, err, bucket.ErrCanceled)
	case <-time.After(10 * time.Second):
		t.Fatal("a caller that gave up waited for the store")
	}
	time.Sleep(20 * time.Millisecond) // let the others queue behind the fetch
	close(gate)
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, int64(1), b.Stats().Stats)
	assert.Equal(t, int64(1), b.Stats().Lists)
}

// While the store is down, names known before (fresh or expired) answer
// from what was known, and names never seen fail; once the store is back
// the first resolve after the TTL sees the change. (Failing fast once the
// store is known down is the store stack's circuit breaker, package
// retry.)
func TestResolveThroughAnOutage(t *testing.T) {
	b := mem.New("b")
	put(t, b, "d/f", "x")
	put(t, b, "d/g", "y")
	clock := newFakeClock()
	c := newTestCache(t, b, clock, nil)
	ctx := context.Background()
	l := c.NewLister("d")
	for !l.Complete {
		require.NoError(t, c.NextPage(ctx, l))
	}
	_, err := c.Resolve(ctx, "d/f")
	require.NoError(t, err)

	down := func() error { return fmt.Errorf("%w: refused", bucket.ErrUnavailable) }
	b.SetFaults(mem.Faults{
		Stat: func(context.Context, *bucket.StatRequest) error { return down() },
		List: func(context.Context, *bucket.ListRequest) error { return down() },
	})
	clock.Advance(2 * time.Minute)
	for _, name := range []string{"d/f", "d/g", "d/f"} {
		e, err := c.Resolve(ctx, name)
		require.NoError(t, err, "a known name through an outage")
		assert.Equal(t, File, e.Kind)
	}
	_, err = c.Resolve(ctx, "never-seen")
	assert.ErrorIs(t, err, bucket.ErrUnavailable, "nothing known about it")
	e, err := c.Resolve(ctx, "d/never-seen")
	require.NoError(t, err)
	assert.Equal(t, None, e.Kind, "the listing said so")
	assert.Equal(t, uint64(4), c.StaleServed())

	b.SetFaults(mem.Faults{})
	put(t, b, "d/f", "longer now")
	e, err = c.Resolve(ctx, "d/f")
	require.NoError(t, err)
	assert.EqualValues(t, 10, e.Obj.Size, "back: the first resolve sees the change")
}

// A Lister reads page by page, keeps offsets stable, lets a directory win
// over a file of the same name found on another page, hides names that
// cannot be POSIX names, and caches the complete listing.
func TestListerPages(t *testing.T) {
	b := mem.New("b")
	for i := range 12 {
		put(t, b, fmt.Sprintf("d/f%02d", i), "x")
	}
	put(t, b, "d/x", "file")
	put(t, b, "d/x/y", "under")
	put(t, b, "d//bad", "hidden")
	put(t, b, "d/", "") // the directory's own marker
	c := newTestCache(t, b, nil, func(cfg *Config) { cfg.PageSize = 5 })
	ctx := context.Background()
	l := c.NewLister("d")
	require.False(t, l.Complete)
	pages := 0
	for !l.Complete {
		require.NoError(t, c.NextPage(ctx, l))
		pages++
	}
	assert.Greater(t, pages, 2)
	var names []string
	for i := range l.Len() {
		names = append(names, l.At(i).Name)
		assert.True(t, l.Settled(i))
	}
	assert.Len(t, names, 13, "%v", names)
	assert.Equal(t, "f00", names[0])
	assert.Equal(t, "x", names[12])
	assert.Equal(t, Dir, l.At(12).Kind, "the directory wins")
	assert.Equal(t, uint64(1), c.Hidden())

	cached, ok := c.Listing("d")
	require.True(t, ok)
	assert.Equal(t, 13, cached.Len())
	i, ok := cached.Index("f03")
	require.True(t, ok)
	name, obj, file := cached.Entry(i)
	assert.Equal(t, "f03", name)
	assert.Equal(t, "d/f03", obj.Name)
	assert.True(t, file)
	before := requests(b)
	l2 := c.NewLister("d")
	assert.True(t, l2.Complete, "from the cached listing")
	e, err := c.Resolve(ctx, "d/missing")
	require.NoError(t, err)
	assert.Equal(t, None, e.Kind)
	assert.Equal(t, before, requests(b), "the listing answers")

	assert.Equal(t, 1, c.Invalidate("d/f03"), "the parent's listing, which names it")
	_, ok = c.Listing("d")
	assert.False(t, ok, "the parent's listing names it")
}
