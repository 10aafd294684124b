package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseScaleArgs(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseScaleArgs(nil, &stderr)
	require.NoError(t, err)
	assert.Equal(t, []int{10_000, 100_000, imagenetFiles}, o.Files, "the issue's curve, ending at ImageNet's count")
	assert.Equal(t, 1000, o.Dirs)
	assert.Equal(t, 1_000_000, o.Flat)
	assert.Equal(t, 8, o.Readers)
	assert.Equal(t, SizesAuto, o.Sizes)
	assert.True(t, o.GCS)
	lim, err := o.memoryLimit()
	require.NoError(t, err)
	assert.Equal(t, int64(512<<20), lim, "ferry's default --memory-limit")

	o, err = parseScaleArgs([]string{"--files", "2k,30000", "--tiny", "--flat", "0", "--no-gcs", "--ferry-args", "--memory-limit 1GiB"}, &stderr)
	require.NoError(t, err)
	assert.Equal(t, []int{2000, 30000}, o.Files)
	assert.Equal(t, SizesTiny, o.Sizes)
	assert.Zero(t, o.Flat)
	assert.False(t, o.GCS)
	lim, err = o.memoryLimit()
	require.NoError(t, err)
	assert.Equal(t, int64(1<<30), lim)

	for _, bad := range [][]string{
		{"--files", "100K,10K"},
		{"--files", "10K,10K"},
		{"--files", "0"},
		{"--files", "ten"},
		{"--files", "1.5"},
		{"--flat", "1M,2M"},
		{"--sizes", "huge"},
		{"--readers", "0"},
		{"--ferry-args", "--metadata-ttl=60s"},
		{"--ferry-args", "--memory-limit lots"},
		{"extra"},
	} {
		_, err := parseScaleArgs(bad, &stderr)
		assert.Error(t, err, "%q", bad)
	}
}

func TestParseCounts(t *testing.T) {
	n, err := parseCounts("10K, 100K,1.28M")
	require.NoError(t, err)
	assert.Equal(t, []int{10_000, 100_000, 1_281_167}, n)
	n, err = parseCounts("1.5M,2M")
	require.NoError(t, err)
	assert.Equal(t, []int{1_500_000, 2_000_000}, n)
	for _, n := range []int{10_000, 100_000, imagenetFiles, 2_000_000, 1_500_000, 1234} {
		back, err := parseCounts(countLabel(n))
		require.NoError(t, err)
		assert.Equal(t, []int{n}, back, "countLabel(%d) = %q", n, countLabel(n))
	}
}

// TestTreeShape checks the names, the spread over directories, the
// sizes' mean and bounds, and that a smaller tree is the prefix of a
// larger one.
func TestTreeShape(t *testing.T) {
	tr := Tree{Root: "train", Files: 20_000, Dirs: 1000, Seed: 3}
	assert.Equal(t, "train/n00000/n00000_0.JPEG", tr.Name(0))
	assert.Equal(t, "train/n00999/n00999_0.JPEG", tr.Name(999))
	assert.Equal(t, "train/n00001/n00001_1.JPEG", tr.Name(1001))
	perDir := map[string]int{}
	seen := map[string]bool{}
	for _, n := range tr.Names() {
		perDir[filepath.Dir(n)]++
		assert.False(t, seen[n], "%s twice", n)
		seen[n] = true
	}
	assert.Len(t, perDir, 1000)
	for d, c := range perDir {
		require.Equal(t, 20, c, d)
	}
	var sum int64
	for i := range tr.Files {
		s := tr.Size(i)
		require.GreaterOrEqual(t, s, int64(imagenetMin))
		require.LessOrEqual(t, s, int64(imagenetMax))
		sum += s
	}
	assert.Equal(t, sum, tr.TotalBytes())
	mean := float64(sum) / float64(tr.Files)
	assert.InDelta(t, imagenetMean, mean, 0.03*imagenetMean, "mean size near ImageNet's")
	assert.NotEqual(t, tr.Size(0), tr.Size(1), "sizes are drawn, not constant")

	small := Tree{Root: "train", Files: 500, Dirs: 1000, Seed: 3}
	for i := range small.Files {
		require.Equal(t, tr.Name(i), small.Name(i))
		require.Equal(t, tr.Size(i), small.Size(i))
	}
	other := Tree{Root: "train", Files: 500, Dirs: 1000, Seed: 4}
	assert.NotEqual(t, tr.Size(7), other.Size(7), "the seed changes the sizes")

	flat := Tree{Root: "flat", Files: 10, Dirs: 1, Tiny: 512}
	assert.Equal(t, "flat/00000003.JPEG", flat.Name(3))
	assert.Equal(t, int64(512), flat.Size(3))
	assert.NotEqual(t, tr.ID(), small.ID())
	assert.Contains(t, flat.ID(), "tiny512")
}

// TestTreeGenerate writes a tree, checks its files, and checks that a
// second run reuses it and a changed tree replaces it.
func TestTreeGenerate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tree")
	tr := Tree{Root: "train", Files: 300, Dirs: 7, Seed: 1}
	wrote, err := tr.Generate(context.Background(), dir, 4, nil)
	require.NoError(t, err)
	assert.True(t, wrote)
	var files int
	require.NoError(t, filepath.WalkDir(filepath.Join(dir, "train"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files++
		}
		return err
	}))
	assert.Equal(t, 300, files)
	buf := make([]byte, imagenetMax)
	for _, i := range []int{0, 150, 299} {
		b, err := os.ReadFile(filepath.Join(dir, tr.Name(i)))
		require.NoError(t, err)
		assert.Equal(t, tr.content(i, buf), b, "file %d", i)
	}
	a, _ := os.ReadFile(filepath.Join(dir, tr.Name(0)))
	b, _ := os.ReadFile(filepath.Join(dir, tr.Name(1)))
	assert.NotEqual(t, a[:64], b[:64], "each file its own bytes")

	// Reused: a marker file inside survives.
	marker := filepath.Join(dir, "train", "marker")
	require.NoError(t, os.WriteFile(marker, nil, 0o644))
	wrote, err = tr.Generate(context.Background(), dir, 4, nil)
	require.NoError(t, err)
	assert.False(t, wrote)
	assert.FileExists(t, marker)

	// Another tree in the same place: written again from nothing.
	tr.Tiny = 100
	wrote, err = tr.Generate(context.Background(), dir, 4, nil)
	require.NoError(t, err)
	assert.True(t, wrote)
	assert.NoFileExists(t, marker)
	st, err := os.Stat(filepath.Join(dir, tr.Name(5)))
	require.NoError(t, err)
	assert.Equal(t, int64(100), st.Size())

	_, err = Tree{Root: "x", Files: 0, Dirs: 1}.Generate(context.Background(), dir, 1, nil)
	assert.Error(t, err)
}

func TestScaleTreesAutoSizes(t *testing.T) {
	o := ScaleOptions{Files: []int{10_000, 100_000}, Dirs: 1000, Sizes: SizesAuto, TinySize: 512, Seed: 1}
	ts, note, err := o.trees(80 << 30) // 11 + 1.1 + 11 GiB and 10 to spare fit
	require.NoError(t, err)
	require.Len(t, ts, 2)
	assert.Empty(t, note)
	assert.Zero(t, ts[1].Tiny)
	assert.Equal(t, 100_000, ts[1].Files)

	ts, note, _ = o.trees(30 << 30) // the trees fit, but not with a cache of the largest and room to spare
	assert.Equal(t, int64(512), ts[1].Tiny)
	assert.NotEmpty(t, note)

	o.Files = []int{10_000, 100_000, imagenetFiles}
	ts, note, _ = o.trees(80 << 30) // 140 GiB of ImageNet does not
	assert.Equal(t, int64(512), ts[0].Tiny, "one size for the whole curve")
	assert.Equal(t, int64(512), ts[2].Tiny)
	assert.Contains(t, note, "512 B")

	o.Sizes = SizesImageNet
	ts, _, err = o.trees(300 << 30)
	require.NoError(t, err)
	assert.Zero(t, ts[2].Tiny, "asked for, and it fits")
	_, _, err = o.trees(80 << 30)
	assert.ErrorContains(t, err, "--sizes tiny", "asked for, but it does not fit: an error before writing anything")

	o.Sizes = SizesTiny
	ts, note, err = o.trees(200 << 30)
	require.NoError(t, err)
	assert.Equal(t, int64(512), ts[0].Tiny, "asked for")
	assert.Empty(t, note)
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP go_memstats_heap_inuse_bytes x
# TYPE go_memstats_heap_inuse_bytes gauge
go_memstats_heap_inuse_bytes 1.2345e+07
ferry_metadata_bytes{kind="names"} 100
ferry_metadata_bytes{kind="listings"} 50
ferry_fs_inodes{source="file:///a b",mountpoint="/m"} 7
ferry_metadata_bytes_other 9
`
	m, err := parseMetrics(strings.NewReader(text), metricHeap, metricMetadata, metricInodes, metricEvictions)
	require.NoError(t, err)
	assert.Equal(t, map[string]float64{metricHeap: 12_345_000, metricMetadata: 150, metricInodes: 7}, m)
}

// TestScaleTargets checks the targets' arithmetic on made-up rows.
func TestScaleTargets(t *testing.T) {
	rep := &ScaleReport{Options: ScaleOptions{Files: []int{10_000, 100_000}, Flat: 1_000_000}, MemoryLimit: 512 << 20}
	read := func(n int, src, phase string, secs float64) ScaleRow {
		return ScaleRow{Files: n, Source: src, Phase: phase, Pass: PassRead, Seconds: secs}
	}
	cold := read(100_000, SrcFile, PhaseCold, 10) // 10K files/s
	cold.FerryCPU = 13                            // 130 µs a file
	cold.PeakRSS = 700 << 20
	warm := read(100_000, SrcFile, PhaseWarm, 4) // 25K files/s
	warm.PeakRSS = 800 << 20                     // over 768
	rep.Rows = []ScaleRow{
		read(10_000, SrcFile, PhaseCold, 0.9),     // 11.1K files/s: 90% exactly
		read(10_000, SrcFile, PhaseWarm, 0.3),     // 33.3K files/s: 75%
		read(10_000, SrcFile, PhaseRemount, 1),    // 10K
		read(100_000, SrcFile, PhaseRemount, 10),  // 10K: 100%
		read(100_000, SrcLocal, PhaseLocal, 6.25), // 16K: warm is 156%
		cold, warm,
		{Files: 100_000, Source: SrcFile, Phase: PhaseWarm, Pass: PassRead, Seconds: 0.001, Error: "boom"},
		{Files: 1_000_000, Source: SrcFlat, Phase: PhaseCold, Pass: PassLsL, Seconds: 30, PeakRSS: 300 << 20},
	}
	rep.Mounts = []ScaleMount{{Files: 100_000, Source: SrcFile, Phase: PhaseRemount, MountSeconds: 2.5, FirstReadSeconds: 0.2}}
	rep.derive()
	got := map[string]ClusterTarget{}
	for _, tg := range rep.Targets {
		got[tg.What] = tg
	}
	require.Len(t, rep.Targets, 9)
	assert.True(t, got["cold read files/s at 100K / at 10K"].Met, "90% is enough")
	assert.Contains(t, got["cold read files/s at 100K / at 10K"].Got, "90.0%")
	assert.False(t, got["warm read files/s at 100K / at 10K"].Met, "75%; the failed row is not the warm row")
	assert.True(t, got["remount read files/s at 100K / at 10K"].Met)
	assert.True(t, got["warm read / local disk at 100K"].Met)
	assert.Contains(t, got["warm read / local disk at 100K"].Got, "156%")
	assert.False(t, got["peak RSS at 100K, any pass"].Met, "800 MiB over 512 + 256")
	assert.Contains(t, got["peak RSS at 100K, any pass"].Got, "800 MiB (warm read)")
	assert.False(t, got["restart on the cache of 100K files: mount returns"].Met)
	assert.True(t, got["restart: first read served after the mount returns"].Met)
	assert.True(t, got["ferry CPU per cold file read at 100K"].Met, "130 µs <= 135")
	assert.True(t, got["ls -l of a flat 1M-object directory, cold: peak RSS"].Met)
}

func TestScaleReportWrites(t *testing.T) {
	rep := &ScaleReport{Options: ScaleOptions{Files: []int{1000, 2000}, Readers: 8}, MemoryLimit: 512 << 20,
		Trees: []Tree{{Root: "train", Files: 1000, Dirs: 10}, {Root: "train", Files: 2000, Dirs: 10}}}
	for _, n := range []int{1000, 2000} {
		for _, ph := range []string{PhaseCold, PhaseWarm, PhaseRemount} {
			rep.Rows = append(rep.Rows, ScaleRow{Files: n, Source: SrcFile, Phase: ph, Pass: PassRead, Seconds: 1, PeakRSS: 1 << 20})
		}
		rep.Rows = append(rep.Rows, ScaleRow{Files: n, Source: SrcLocal, Phase: PhaseLocal, Pass: PassRead, Seconds: 0.5})
	}
	rep.derive()
	dir := t.TempDir()
	var out bytes.Buffer
	require.NoError(t, rep.write(&out, dir))
	for _, name := range []string{"README.md", "results.json", "files-per-second.svg"} {
		st, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Positive(t, st.Size(), name)
	}
	assert.Contains(t, out.String(), "| 2K | 4000 | 2000 | 2000 | 2000 |")
	// --render: the same figures, the targets checked again.
	again := t.TempDir()
	out.Reset()
	require.NoError(t, renderScale(context.Background(), ScaleOptions{Render: filepath.Join(dir, "results.json"), Out: again}, nil, &out, nil))
	a, err := os.ReadFile(filepath.Join(dir, "README.md"))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(again, "README.md"))
	require.NoError(t, err)
	assert.Equal(t, string(a), string(b))
	assert.Contains(t, out.String(), "| warm read / local disk at 2K | 50% (2000 / 4000 files/s) |")
	phases, pts := rep.scaleCurves()
	assert.Equal(t, []string{PhaseLocal, PhaseCold, PhaseWarm, PhaseRemount}, phases)
	assert.Len(t, pts[PhaseCold], 2)
}

// TestWatchMetrics serves a heap that rises then falls and checks that
// the watch keeps the highest value and the last inode count.
func TestWatchMetrics(t *testing.T) {
	var mu sync.Mutex
	heaps := []int{100, 300, 200}
	served := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		h := heaps[min(served, len(heaps)-1)]
		served++
		fmt.Fprintf(w, "%s %d\n%s{source=\"x\"} %d\n", metricHeap, h, metricInodes, served)
	}))
	defer srv.Close()
	p := watchMetrics(srv.URL, time.Millisecond)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return served >= 3
	}, 5*time.Second, time.Millisecond)
	got := p.stop()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, int64(300), got.heap, "the peak, not the last")
	assert.Equal(t, int64(served), got.inodes, "the last sample, taken at stop")

	// A slow watch samples once at the start and once at stop: the pass's
	// end is never missed.
	p = watchMetrics(srv.URL, time.Hour)
	before := served
	mu.Unlock()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return served == before+1
	}, 5*time.Second, time.Millisecond)
	got = p.stop()
	mu.Lock()
	assert.Equal(t, before+2, served)
	assert.Equal(t, int64(before+2), got.inodes)

	none := watchMetrics("", time.Millisecond).stop()
	assert.Zero(t, none.heap, "no metrics address: nothing scraped")
}
