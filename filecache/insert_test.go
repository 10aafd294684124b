package filecache

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Objects of the insertion tests: 16 blocks each, read 4 blocks at a time
// as a file reader would, fetching (and writing) what the cache misses.
const (
	insBlocks = 16
	insChunk  = 4
	insSize   = insBlocks * testBS
	insCached = 64 // objects the tests' cache holds
)

func insObjs(prefix string, n int) []Key {
	objs := make([]Key, n)
	for i := range objs {
		objs[i] = obj(fmt.Sprintf("%s%d", prefix, i), insSize)
	}
	return objs
}

// readPass reads each object whole, in order, writing the chunks that
// missed as readahead would, and returns the share of bytes that hit. It
// ends with an index commit, as a real epoch (longer than the commit
// interval) would: until its deletion is committed, an evicted object is
// not written again, which would hide churn.
func readPass(t *testing.T, s *Store, objs []Key) float64 {
	t.Helper()
	var hit, total int
	for _, o := range objs {
		for b := int64(0); b < insBlocks; b += insChunk {
			p := make([]byte, insChunk*testBS)
			ok := make([]bool, insChunk)
			n := s.ReadBlocks(o, b, p, ok)
			hit += n * testBS
			total += len(p)
			if n < insChunk {
				s.WriteBlocks(o, b, blocksData(o, b, insChunk, testBS))
			}
		}
	}
	require.NoError(t, s.flush())
	return float64(hit) / float64(total)
}

func shuffled(rng *rand.Rand, objs []Key) []Key {
	order := append([]Key(nil), objs...)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	return order
}

// insStore opens a cache of insCached objects that commits only when its
// test does (readPass ends with a commit) or when a write kicks it: an
// evicted key cannot be written again until its deletion commits, so a
// ticking commit made what these tests count depend on how long a pass
// took (a CI run under load fetched 215 objects where 260 were meant).
func insStore(t *testing.T) *Store {
	return openT(t, Config{Dir: t.TempDir(), MaxSize: insCached * insSize},
		hooks{flushTick: make(chan time.Time)})
}

// A dataset larger than the cache, read epoch after epoch (in order, and
// shuffled), keeps a stable subset: from epoch 2 on, at least 90% of
// cache/dataset hits. Plain LRU hits nothing on the ordered scan.
func TestCyclicScanKeepsAStableSubset(t *testing.T) {
	for _, tc := range []struct {
		ratio   float64 // dataset / cache
		shuffle bool
	}{{1.5, false}, {3, false}, {1.5, true}, {3, true}} {
		t.Run(fmt.Sprintf("ratio=%v/shuffle=%v", tc.ratio, tc.shuffle), func(t *testing.T) {
			s := insStore(t)
			objs := insObjs("o", int(tc.ratio*insCached))
			rng := rand.New(rand.NewPCG(1, 2))
			for epoch := 1; epoch <= 6; epoch++ {
				order := objs
				if tc.shuffle {
					order = shuffled(rng, objs)
				}
				got := readPass(t, s, order)
				t.Logf("epoch %d: hit ratio %.3f (cache/dataset %.3f)", epoch, got, 1/tc.ratio)
				if epoch == 1 {
					assert.Zero(t, got)
				} else {
					assert.GreaterOrEqual(t, got, 0.9/tc.ratio, "epoch %d", epoch)
				}
				assert.LessOrEqual(t, s.Stats().UsedBytes, int64(insCached*insSize))
			}
			assert.False(t, s.ins.lru, "scan-resistant mode")
			s.checkInvariants(t)
		})
	}
}

// A working set that fits is never evicted: every epoch after the first
// hits every byte.
func TestFittingWorkingSetAlwaysHits(t *testing.T) {
	s := insStore(t)
	objs := insObjs("o", insCached)
	assert.Zero(t, readPass(t, s, objs))
	for epoch := 2; epoch <= 4; epoch++ {
		assert.Equal(t, 1.0, readPass(t, s, objs), "epoch %d", epoch)
	}
	assert.Zero(t, s.Stats().Evictions)
}

// The review of the admission policy (docs/notes/2026-12-02-eviction.md):
// a cache filled by an old set read once, then a new set read in order,
// pass after pass. LRU caches a new set that fits in its first pass
// (100% from pass 2) and hits nothing of one 1.5x the cache. Here the
// shadows see LRU hit the new set in pass 2 and switch to it after
// about a sixteenth of the cache (switchGap); the objects before the
// switch enter in pass 3, so the set is cached whole from pass 4 (11/16
// to 15/16 of it in pass 3). A set
// 1.5x the cache gets in at one object in bipOneIn misses: 3 objects a
// pass.
func TestNewSetAfterAnOldSetReadOnce(t *testing.T) {
	for _, tc := range []struct {
		share float64 // new set / cache
		want  []float64
	}{
		{0.25, []float64{0, 1.0 / 16, 11.0 / 16, 1, 1}},
		{0.5, []float64{0, 1.0 / 32, 28.0 / 32, 1, 1}},
		{1, []float64{0, 2.0 / 64, 60.0 / 64, 1, 1}},
		{1.5, []float64{0, 3.0 / 96, 6.0 / 96, 9.0 / 96, 12.0 / 96}},
	} {
		t.Run(fmt.Sprintf("share=%v", tc.share), func(t *testing.T) {
			s := insStore(t)
			require.Zero(t, readPass(t, s, insObjs("old", insCached)))
			cur := insObjs("new", int(tc.share*insCached))
			for pass, want := range tc.want {
				got := readPass(t, s, cur)
				t.Logf("pass %d over the new set: hit ratio %.3f (LRU mode %v)", pass+1, got, s.ins.lru)
				assert.GreaterOrEqual(t, got, want-0.001, "pass %d", pass+1)
			}
			assert.Equal(t, tc.share <= 1, s.ins.lru, "LRU mode")
			s.checkInvariants(t)
		})
	}
}

// A working set that moves on replaces the old one: cached whole from
// its fourth pass.
func TestShiftedWorkingSetReplacesTheOld(t *testing.T) {
	s := insStore(t)
	old := insObjs("old", insCached)
	for epoch := 0; epoch < 5; epoch++ {
		readPass(t, s, old)
	}
	require.Equal(t, 1.0, readPass(t, s, old))
	cur := insObjs("new", insCached/2)
	assert.Zero(t, readPass(t, s, cur))
	readPass(t, s, cur)
	assert.GreaterOrEqual(t, readPass(t, s, cur), 27.0/32, "pass 3")
	for pass := 4; pass <= 5; pass++ {
		assert.Equal(t, 1.0, readPass(t, s, cur), "pass %d", pass)
	}
	// The new set displaced the least recent half of the old; the rest
	// stays.
	assert.Equal(t, 1.0, readPass(t, s, old[insCached/2:]))
	s.checkInvariants(t)
}

// Entries left by an earlier run and not read since give way to new data
// at once: eviction takes them first, whatever the mode.
func TestEntriesFromAnEarlierRunGiveWay(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Dir: dir, MaxSize: insCached * insSize}
	s := openT(t, cfg, hooks{})
	readPass(t, s, insObjs("old", insCached))
	require.NoError(t, s.Close())

	s = openT(t, cfg, hooks{})
	cur := insObjs("new", insCached/2)
	assert.Zero(t, readPass(t, s, cur))
	assert.Equal(t, 1.0, readPass(t, s, cur), "the new set was cached in its first pass")
	s.checkInvariants(t)
}

// An object three times the cache's size streams through: its first
// third stays cached, and every later pass hits it.
func TestObjectLargerThanTheCacheStreams(t *testing.T) {
	const cached = 4 // objects' worth
	s := openT(t, Config{Dir: t.TempDir(), MaxSize: cached * insSize}, hooks{})
	big := obj("big", 3*cached*insSize)
	read := func() float64 {
		var hit, total int
		for b := int64(0); b < 3*cached*insBlocks; b += insChunk {
			p := make([]byte, insChunk*testBS)
			n := s.ReadBlocks(big, b, p, make([]bool, insChunk))
			hit, total = hit+n*testBS, total+len(p)
			if n < insChunk {
				s.WriteBlocks(big, b, blocksData(big, b, insChunk, testBS))
			}
		}
		require.NoError(t, s.flush())
		return float64(hit) / float64(total)
	}
	assert.Zero(t, read())
	// A third of it, less a block or two where the file system took one
	// for the file's extent tree (writeback in between the writes, as
	// under a loaded CI, splits the file's extents): the store counts
	// what the file occupies.
	const block = 1.0 / (3 * cached * insBlocks)
	second := read()
	assert.InDelta(t, 1.0/3-block, second, block+0.001, "pass 2")
	assert.Equal(t, second, read(), "pass 3 hits what pass 2 did")
	// The cache is full, give or take those blocks.
	assert.InDelta(t, cached*insSize, s.Stats().UsedBytes, 2*testBS)
	s.checkInvariants(t)
}

// The shadows' memory is bounded whatever the number of objects: the
// sampling rate halves instead of a list growing past shadowMax.
func TestShadowMemoryIsBounded(t *testing.T) {
	const objects = 1_280_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	sh := new(shadows)
	rng := rand.New(rand.NewPCG(3, 4))
	const limit = 1 << 40 // a 1 TiB cache of 1 MiB objects holds 1M
	for i := 0; i < objects; i++ {
		h := rng.Uint64()
		sh.use(h, 1<<20, 1<<20, true, limit)
		sh.use(h, 1<<20, 1<<20, false, limit) // its read
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	for i := range sh.lists {
		assert.LessOrEqual(t, len(sh.lists[i].pos), shadowMax)
		assert.LessOrEqual(t, len(sh.lists[i].nodes), shadowMax)
	}
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("1.28M objects: sampling 1 in %d, %d and %d entries, %d bytes held", 1<<sh.shift,
		len(sh.lists[0].pos), len(sh.lists[1].pos), held)
	assert.Positive(t, sh.shift, "the rate was lowered")
	// Two lists of 8192 nodes (32 bytes) and their maps.
	assert.Less(t, held, int64(2<<20))
	runtime.KeepAlive(sh)
}

// The metrics show the mode, its changes, where new entries went and
// what each shadow hit: after a new set that fits, read twice after an
// old one read once, the store is in LRU mode, having switched once; the
// LRU shadow hit the new set's second pass, the other almost nothing.
func TestInsertionMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := openT(t, Config{Dir: t.TempDir(), MaxSize: insCached * insSize, Registerer: reg}, hooks{})
	readPass(t, s, insObjs("old", insCached))
	cur := insObjs("new", insCached/2)
	readPass(t, s, cur)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ferry_cache_insertion_mode Where new cache entries enter once the cache is full: 1 scan-resistant (at the least recent end, one in 32 at the most recent: a dataset larger than the cache keeps a stable part), 0 LRU (at the most recent end). Chosen by which of the two would have hit more of late, simulated on a sample of the objects.
# TYPE ferry_cache_insertion_mode gauge
ferry_cache_insertion_mode 1
# HELP ferry_cache_bip_inserts_total New cache entries placed at the least recent end (scan-resistant mode, cache full): the next to be evicted unless read again.
# TYPE ferry_cache_bip_inserts_total counter
ferry_cache_bip_inserts_total 31
`), "ferry_cache_insertion_mode", "ferry_cache_bip_inserts_total"))
	readPass(t, s, cur)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ferry_cache_insertion_mode Where new cache entries enter once the cache is full: 1 scan-resistant (at the least recent end, one in 32 at the most recent: a dataset larger than the cache keeps a stable part), 0 LRU (at the most recent end). Chosen by which of the two would have hit more of late, simulated on a sample of the objects.
# TYPE ferry_cache_insertion_mode gauge
ferry_cache_insertion_mode 0
# HELP ferry_cache_insertion_switches_total Changes of ferry_cache_insertion_mode.
# TYPE ferry_cache_insertion_switches_total counter
ferry_cache_insertion_switches_total 1
`), "ferry_cache_insertion_mode", "ferry_cache_insertion_switches_total"))
	lru, bip := shadowRatio(t, reg, "lru"), shadowRatio(t, reg, "scan_resistant")
	t.Logf("shadow hit ratios: lru %.3f, scan-resistant %.3f", lru, bip)
	assert.Greater(t, lru, 0.3)
	assert.Less(t, bip, 0.1)
}

// shadowRatio is ferry_cache_shadow_hit_ratio for policy.
func shadowRatio(t *testing.T, reg *prometheus.Registry, policy string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "ferry_cache_shadow_hit_ratio" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "policy" && lp.GetValue() == policy {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no shadow hit ratio for %s", policy)
	return 0
}
