package filecache

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// TestOpenLeavesEntriesCold: Open reads access times and sizes only;
// an entry is read from the index, and checked, when it is first used.
func TestOpenLeavesEntriesCold(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir}, hooks{})
	var objs []Key
	for i := 0; i < 50; i++ {
		o := obj(fmt.Sprintf("o%d", i), 2*testBS)
		require.Equal(t, 2, s.WriteBlocks(o, 0, blocksData(o, 0, 2, testBS)))
		objs = append(objs, o)
	}
	used := s.Stats().UsedBytes
	require.NoError(t, s.Close())

	s = openT(t, Config{Dir: dir}, hooks{})
	st := s.Stats()
	assert.EqualValues(t, 50, st.Entries)
	assert.EqualValues(t, 50, st.ColdEntries, "no entry read at Open")
	assert.Equal(t, used, st.UsedBytes, "sizes from the index")
	s.mu.Lock()
	assert.Empty(t, s.entries)
	s.mu.Unlock()

	for _, o := range objs[:10] {
		assert.True(t, readOK(t, s, o, 1))
	}
	st = s.Stats()
	assert.EqualValues(t, 10, st.Warmed)
	assert.EqualValues(t, 40, st.ColdEntries)
	assert.EqualValues(t, 50, st.Entries)
	assert.Equal(t, du(t, dir), st.UsedBytes)
	s.checkInvariants(t)
}

// TestCoolingBoundsWarmEntries: past maxWarm, the least recently used
// idle entries go back to the cold queue after a commit, and come back
// whole.
func TestCoolingBoundsWarmEntries(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, hooks{maxWarm: 8})
	var objs []Key
	for i := 0; i < 30; i++ {
		o := obj(fmt.Sprintf("o%d", i), 3*testBS)
		require.Equal(t, 3, s.WriteBlocks(o, 0, blocksData(o, 0, 3, testBS)))
		objs = append(objs, o)
	}
	// A file handed out whole is not idle.
	w, ok := s.Whole(objs[0])
	require.True(t, ok)
	require.NoError(t, s.flush())
	st := s.Stats()
	assert.EqualValues(t, 30, st.Entries)
	assert.EqualValues(t, 22, st.Cooled)
	assert.EqualValues(t, 22, st.ColdEntries)
	s.mu.Lock()
	assert.Len(t, s.entries, 8)
	assert.Contains(t, s.entries, s.keyFor(objs[0]), "held, so warm")
	assert.Contains(t, s.entries, s.keyFor(objs[29]), "most recent, so warm")
	assert.NotContains(t, s.entries, s.keyFor(objs[1]), "least recent idle, so cold")
	s.mu.Unlock()
	w.Release()
	s.checkInvariants(t)

	for _, o := range objs {
		for i := int64(0); i < 3; i++ {
			assert.True(t, readOK(t, s, o, i), "%s block %d", o.Name, i)
		}
	}
	assert.EqualValues(t, 22, s.Stats().Warmed)
	s.checkInvariants(t)
}

// TestEvictionTakesColdFirst: every cold entry is less recent than every
// warm one, whatever the access times before the restart said.
func TestEvictionTakesColdFirst(t *testing.T) {
	dir := t.TempDir()
	a, b, c := obj("a", 4*testBS), obj("b", 4*testBS), obj("c", 4*testBS)
	s := openT(t, Config{Dir: dir}, hooks{})
	require.Equal(t, 4, s.WriteBlocks(b, 0, blocksData(b, 0, 4, testBS)))
	require.Equal(t, 4, s.WriteBlocks(a, 0, blocksData(a, 0, 4, testBS)))
	one := s.Stats().UsedBytes / 2
	require.NoError(t, s.Close())

	s = openT(t, Config{Dir: dir, MaxSize: 2 * one}, hooks{})
	require.True(t, readOK(t, s, b, 0)) // b, the older, warm now
	require.Equal(t, 4, s.WriteBlocks(c, 0, blocksData(c, 0, 4, testBS)))
	assert.False(t, s.HasBlock(a, 0), "a, cold, evicted")
	assert.True(t, s.HasBlock(b, 3))
	assert.True(t, s.HasBlock(c, 3))
	assert.EqualValues(t, 1, s.Stats().Evictions)
	s.checkInvariants(t)
}

// TestAtimeRowsWithoutSizeUpgrade: an index written before atime rows
// held sizes has its files counted once, as it is converted.
func TestAtimeRowsWithoutSizeUpgrade(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir}, hooks{})
	for i := 0; i < 5; i++ {
		o := obj(fmt.Sprintf("o%d", i), 2*testBS)
		require.Equal(t, 2, s.WriteBlocks(o, 0, blocksData(o, 0, 2, testBS)))
	}
	require.NoError(t, s.Close())
	toIndexFormat1(t, dir)
	editIndex(t, dir, func(tx *bolt.Tx) error {
		ab := tx.Bucket(v1Atime)
		var rows [][2][]byte
		require.NoError(t, ab.ForEach(func(k, v []byte) error {
			rows = append(rows, [2][]byte{append([]byte(nil), k...), append([]byte(nil), v[:8]...)})
			return nil
		}))
		for _, r := range rows {
			require.NoError(t, ab.Put(r[0], r[1]))
		}
		return nil
	})

	s = openT(t, Config{Dir: dir}, hooks{})
	assert.Equal(t, du(t, dir), s.Stats().UsedBytes)
	assert.EqualValues(t, 5, s.Stats().ColdEntries)
	require.NoError(t, s.Close())
	assert.Len(t, indexRows(t, dir, tagAtime), 5)
	editIndex(t, dir, func(tx *bolt.Tx) error {
		return tx.Bucket(rowsBucket).ForEach(func(k, v []byte) error {
			if _, tag, _ := rowOf(k); tag == tagAtime {
				r, ok := decodeAtime(k, v)
				assert.True(t, ok)
				assert.Positive(t, r.bytes)
			}
			return nil
		})
	})
}

// TestColdEntryMemory bounds what a cold entry costs: the index of a
// large cache is held as keys and sizes, not records.
func TestColdEntryMemory(t *testing.T) {
	const n = 200_000
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir}, hooks{})
	require.NoError(t, s.Close())
	writeColdRows(t, dir, n)

	// The heap with the store open, less the heap before. (Two
	// collections: the second empties sync.Pools, bbolt's among them.)
	heap := func() float64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return float64(ms.HeapAlloc)
	}
	before := heap()
	s, err := open(testConfig(Config{Dir: dir, MaxSize: 1 << 40}), hooks{})
	require.NoError(t, err)
	defer s.Close()
	require.EqualValues(t, n, s.Stats().ColdEntries)
	assert.EqualValues(t, n*4096, s.Stats().UsedBytes)
	perEntry := (heap() - before) / n
	t.Logf("heap per cold entry: %.0f B", perEntry)
	assert.Less(t, perEntry, 80.0, "bytes of heap per cold entry")
}

// TestColdSetCompactsInPlace: a queue whose entries leave and come back
// (warmed, then cooled: an epoch over a cache of cold entries) stays
// within a third over its entries, in chunks it reuses, and keeps its
// order.
func TestColdSetCompactsInPlace(t *testing.T) {
	key := func(i int) coldKey {
		var k coldKey
		binary.LittleEndian.PutUint64(k[:], uint64(i)*0x9e3779b97f4a7c15)
		binary.LittleEndian.PutUint64(k[8:], uint64(i))
		return k
	}
	var c coldSet
	const live = 5 * coldChunk / 2
	var order []int // the queue's order, least recent first
	for i := range live {
		c.add(key(i), uint64(i+1), 1)
		order = append(order, i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	most := 0
	for range 20 * live {
		j := rng.IntN(len(order))
		i := order[j]
		_, ok := c.take(key(i))
		require.True(t, ok)
		c.add(key(i), uint64(i+1), 1)
		order = append(slices.Delete(order, j, j+1), i)
		most = max(most, len(c.chunks))
		if rng.IntN(64) == 0 { // moves head past the gone slots before it
			oldest, ok := c.oldest()
			require.True(t, ok)
			require.Equal(t, key(order[0]), oldest)
		}
	}
	require.Equal(t, live, c.len())
	assert.LessOrEqual(t, most*coldChunk, live*4/3+coldChunk, "slots allocated at most")
	var got []int
	c.each(func(sl coldSlot) {
		i := int(sl.row - 1)
		assert.Equal(t, key(i), sl.key)
		got = append(got, i)
	})
	assert.Equal(t, order, got)
	for _, i := range order {
		row, ok := c.rowOf(key(i))
		require.True(t, ok)
		assert.EqualValues(t, i+1, row)
	}
}

// TestColdSetSharedShortKeys: keys that share their first 8 bytes (the
// queue's index is by them) are each found, taken and compacted right.
func TestColdSetSharedShortKeys(t *testing.T) {
	key := func(short, rest byte) coldKey {
		var k coldKey
		k[0], k[31] = short, rest
		return k
	}
	var c coldSet
	a, b, d := key(1, 1), key(1, 2), key(1, 3)
	other := key(2, 1)
	for i, k := range []coldKey{a, b, other, d} {
		c.add(k, uint64(10+i), int64(i+1))
	}
	require.Equal(t, 4, c.len())
	assert.Len(t, c.more, 2, "b and d share a's short key")
	for _, k := range []coldKey{a, b, d, other} {
		assert.True(t, c.has(k))
	}
	assert.False(t, c.has(key(1, 4)), "a short key's match is checked whole")

	sl, ok := c.take(a)
	require.True(t, ok)
	assert.EqualValues(t, 1, sl.bytes)
	assert.EqualValues(t, 10, sl.row)
	row, ok := c.rowOf(d)
	assert.True(t, ok)
	assert.EqualValues(t, 13, row)
	assert.False(t, c.has(a))
	assert.True(t, c.has(b) && c.has(d), "the others stay found when a leaves pos")
	assert.Len(t, c.more, 1, "one of them took a's place")
	_, ok = c.take(a)
	assert.False(t, ok)

	// Enough gone slots to compact: every key left is still found, in
	// the queue's order.
	for i := range 3 * coldChunk {
		k := key(3, byte(i))
		k[30] = byte(i >> 8)
		c.add(k, 1, 1)
		_, ok := c.take(k)
		require.True(t, ok)
	}
	var order []coldKey
	c.each(func(sl coldSlot) { order = append(order, sl.key) })
	assert.Equal(t, []coldKey{b, other, d}, order)
	assert.Less(t, c.end, coldChunk, "compacted")
	assert.Len(t, c.chunks, 1, "the empty chunks let go")
	for _, k := range order {
		i, ok := c.find(k)
		require.True(t, ok)
		assert.Equal(t, k, c.slot(i).key)
	}
	oldest, _ := c.oldest()
	assert.Equal(t, b, oldest)
}

// TestIndexPagesReleased: after Open's scan (and after commits), a large
// index's pages are not left in ferry's resident memory.
func TestIndexPagesReleased(t *testing.T) {
	s, index := openLargeIndex(t, hooks{})
	require.EqualValues(t, largeIndexRows, s.Stats().ColdEntries)
	rss := mappedRSS(t, index)
	t.Logf("index mapped and resident after Open: %d KiB", rss>>10)
	assert.Less(t, rss, int64(1<<20))
}

// TestIndexPagesReleasedBetweenCommits: pages of the index mapped by a
// reader are released by the releaser's next tick, with no commit and no
// warm to release them (a long commit maps pages for seconds).
func TestIndexPagesReleasedBetweenCommits(t *testing.T) {
	tick := make(chan time.Time)
	released := make(chan struct{})
	s, index := openLargeIndex(t, hooks{releaseTick: tick, released: func() { released <- struct{}{} }})

	rows := 0
	require.NoError(t, s.liveDB.Load().View(func(tx *bolt.Tx) error {
		return tx.Bucket(rowsBucket).ForEach(func(_, _ []byte) error { rows++; return nil })
	}))
	require.Equal(t, largeIndexRows, rows)
	mapped := mappedRSS(t, index)
	t.Logf("index mapped and resident after a walk of its rows: %d KiB", mapped>>10)
	// (Less than the index when a background commit's release ran
	// during the walk, as under -race beside other tests: 11.5 MiB.)
	require.Greater(t, mapped, int64(2<<20), "the walk maps the rows' pages")

	tick <- time.Now()
	<-released
	rss := mappedRSS(t, index)
	t.Logf("after the releaser's tick: %d KiB", rss>>10)
	assert.Less(t, rss, int64(1<<20))
}

// TestCommitReleasesIndexPages: a commit of many new entries, each put
// at a random place in a large index, does not map the whole index
// before its end: it releases the pages as it goes.
func TestCommitReleasesIndexPages(t *testing.T) {
	var index string
	var puts int
	var peak int64
	s, index := openLargeIndex(t, hooks{
		releaseTick: make(chan time.Time), // the releaser never runs
		indexPut: func(_, _ []byte) {
			if puts++; puts%100 == 0 {
				peak = max(peak, mappedRSS(t, index))
			}
		},
	})
	const objects = 4000
	for i := range objects {
		o := obj(fmt.Sprintf("new%d", i), testBS)
		require.Equal(t, 1, s.WriteBlocks(o, 0, blockData(o, 0, testBS)))
	}
	// The commit without flush's release after it: what its last
	// transaction's end left mapped counts too.
	s.flushMu.Lock()
	require.NoError(t, s.flushOnce())
	s.flushMu.Unlock()
	after := mappedRSS(t, index)
	require.GreaterOrEqual(t, puts, objects*2, "the commit's puts")
	t.Logf("index mapped and resident during the commit, highest of %d samples: %d KiB; after it: %d KiB", puts/100, peak>>10, after>>10)
	assert.Greater(t, peak, int64(0), "the puts map pages")
	for _, b := range []int64{peak, after} {
		assert.Less(t, b, int64(24<<20), "released every releasePuts puts and txRows rows, not at the end (the index is 75 MB)")
	}
}

// largeIndexRows is about 45 MB of index, over releaseMin.
const largeIndexRows = 400_000

// openLargeIndex opens a store over an index of largeIndexRows cold
// rows, with h, and returns it and the index file's path.
func openLargeIndex(t *testing.T, h hooks) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir}, hooks{})
	require.NoError(t, s.Close())
	writeColdRows(t, dir, largeIndexRows)
	return openT(t, Config{Dir: dir, MaxSize: 1 << 40}, h), filepath.Join(dir, "v1", "index.db")
}

// mappedRSS is the resident size of this process's maps of path
// (/proc/self/smaps).
func mappedRSS(t *testing.T, path string) int64 {
	raw, err := os.ReadFile("/proc/self/smaps")
	require.NoError(t, err)
	var rss int64
	in := false
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			in = len(f) == 6 && f[5] == path
		case in && len(f) == 3 && f[0] == "Rss:":
			kb, err := strconv.ParseInt(f[1], 10, 64)
			require.NoError(t, err)
			rss += kb << 10
		}
	}
	return rss
}

// writeColdRows writes n atime rows, of 4096 bytes each, into the index
// in dir, as a large cache leaves them (their files do not matter until
// an entry is used).
func writeColdRows(t testing.TB, dir string, n int) {
	db, err := bolt.Open(filepath.Join(dir, "v1", "index.db"), 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(rowsBucket)
		for i := range n {
			var seed [8]byte
			binary.LittleEndian.PutUint64(seed[:], uint64(i))
			k := rowKey(uint64(i+1), tagAtime)
			if err := b.Put(k, seal(k, encodeAtime(int64(i), 4096, sha256.Sum256(seed[:])))); err != nil {
				return err
			}
		}
		return nil
	}))
}

// TestSnapshotAfterCleanClose: a clean Close leaves the entries in LRU
// order for the next Open to read instead of the index; a commit since
// (the index changed) or a damaged snapshot makes Open read the index.
func TestSnapshotAfterCleanClose(t *testing.T) {
	dir := t.TempDir()
	a, b, c := obj("a", 4*testBS), obj("b", 4*testBS), obj("c", 4*testBS)
	s := openT(t, Config{Dir: dir}, hooks{maxWarm: 1})
	require.Equal(t, 4, s.WriteBlocks(b, 0, blocksData(b, 0, 4, testBS)))
	require.Equal(t, 4, s.WriteBlocks(a, 0, blocksData(a, 0, 4, testBS)))
	require.NoError(t, s.flush()) // b cooled: the snapshot has cold and warm entries
	require.EqualValues(t, 1, s.Stats().ColdEntries)
	one := s.Stats().UsedBytes / 2
	require.NoError(t, s.Close())
	snap := filepath.Join(dir, "v1", snapshotName)
	require.FileExists(t, snap)

	// With room for two: c evicts b, the least recently used, so the
	// order came through.
	s = openT(t, Config{Dir: dir, MaxSize: 2 * one}, hooks{})
	assert.True(t, s.fromSnapshot)
	assert.NoFileExists(t, snap, "used once")
	assert.Equal(t, 2*one, s.Stats().UsedBytes)
	require.Equal(t, 4, s.WriteBlocks(c, 0, blocksData(c, 0, 4, testBS)))
	assert.False(t, s.HasBlock(b, 0))
	assert.True(t, readOK(t, s, a, 3))
	s.checkInvariants(t)
	require.NoError(t, s.Close())

	// A commit after the snapshot: stale, so the index is read.
	require.FileExists(t, snap)
	row := entryRow(t, dir, s.keyFor(a))
	require.NotZero(t, row)
	editIndex(t, dir, func(tx *bolt.Tx) error { return deleteEntryRows(tx.Bucket(rowsBucket), row) })
	s = openT(t, Config{Dir: dir}, hooks{})
	assert.False(t, s.fromSnapshot)
	assert.EqualValues(t, 1, s.Stats().Entries, "a's rows are gone")
	assert.True(t, readOK(t, s, c, 0))
	require.NoError(t, s.Close())

	// A damaged snapshot is not used.
	raw, err := os.ReadFile(snap)
	require.NoError(t, err)
	raw[30] ^= 1
	require.NoError(t, os.WriteFile(snap, raw, 0o600))
	s = openT(t, Config{Dir: dir}, hooks{})
	assert.False(t, s.fromSnapshot)
	assert.EqualValues(t, 1, s.Stats().Entries)
	assert.True(t, readOK(t, s, c, 1))
}

// TestAtimeRowsKeptToTheHour: a use writes the entry's atime row again
// only once the row is atimeGrain old, in the process that wrote it and
// in the next (the warm reads the row).
func TestAtimeRowsKeptToTheHour(t *testing.T) {
	dir := t.TempDir()
	var clock atomic.Int64
	clock.Store(time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC).UnixNano())
	var log putLog
	h := hooks{now: clock.Load, indexPut: log.hook}
	taken := func() (atimes []int64) { // the values of the atime rows put
		for _, p := range log.take() {
			if len(p.val) == atimeLen+4 {
				atimes = append(atimes, int64(binary.LittleEndian.Uint64(p.val)))
			}
		}
		return atimes
	}
	at := func(s *Store, d time.Duration) []int64 {
		t.Helper()
		clock.Add(int64(d))
		require.True(t, readOK(t, s, o1, 0))
		require.NoError(t, s.flush())
		return taken()
	}

	s := openT(t, Config{Dir: dir}, h)
	require.Equal(t, 2, s.WriteBlocks(o1, 0, blocksData(o1, 0, 2, testBS)))
	require.NoError(t, s.flush())
	assert.Equal(t, []int64{clock.Load()}, taken(), "the write's row")
	assert.Empty(t, at(s, time.Minute))
	assert.Empty(t, at(s, 58*time.Minute))
	use := clock.Load() + int64(2*time.Minute)
	assert.Equal(t, []int64{use}, at(s, 2*time.Minute), "61 minutes on: the use's time")
	require.NoError(t, s.Close())
	taken()

	s = openT(t, Config{Dir: dir}, h)
	assert.Empty(t, at(s, 30*time.Minute), "the row read at the warm is half an hour old")
	assert.Len(t, at(s, 31*time.Minute), 1)
	require.NoError(t, s.Close())
	taken()

	// A clock set back by more than the grain writes the row too.
	s = openT(t, Config{Dir: dir}, h)
	assert.Len(t, at(s, -2*time.Hour), 1)
	require.NoError(t, s.Close())
	taken()

	// A data file that grew since its row: the warm finds it, and the
	// next commit writes the row, with its size, within the hour.
	f, err := os.OpenFile(s.pathFor(s.keyFor(o1)), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(make([]byte, 1<<20))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	s = openT(t, Config{Dir: dir}, h)
	assert.Len(t, at(s, time.Minute), 1)
	assert.Equal(t, du(t, dir), s.Stats().UsedBytes)
	require.NoError(t, s.Close())
}

// TestWarmOpensTheDataFile: a warm opens the entry's data file for the
// reads that follow; with no descriptor free it looks at the path
// instead, and drops nothing.
func TestWarmOpensTheDataFile(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir}, hooks{})
	o2 := obj("o2", 2*testBS)
	for _, o := range []Key{o1, o2} {
		require.Equal(t, 2, s.WriteBlocks(o, 0, blocksData(o, 0, 2, testBS)))
	}
	require.NoError(t, s.Close())

	s = openT(t, Config{Dir: dir}, hooks{})
	require.True(t, s.HasBlock(o1, 1), "warmed")
	require.NoError(t, os.Remove(s.pathFor(s.keyFor(o1))))
	assert.True(t, readOK(t, s, o1, 0), "read from the file the warm opened")

	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	low := lim
	low.Cur = 0 // every open fails with EMFILE
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	warmed := s.HasBlock(o2, 1)
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
	assert.True(t, warmed, "warmed without its file")
	assert.EqualValues(t, 2, s.Stats().Entries, "nothing dropped")
	assert.True(t, readOK(t, s, o2, 1))
	require.NoError(t, s.Close())
}

var o1 = obj("o1", 2*testBS)
