package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func parse(t *testing.T, args ...string) (Options, error) {
	t.Helper()
	var stderr bytes.Buffer
	return parseArgs(args, &stderr)
}

func TestParseDefaults(t *testing.T) {
	o, err := parse(t, "run")
	require.NoError(t, err)
	assert.Equal(t, "gcs", o.Store)
	assert.Equal(t, allWorkloads, o.Workloads)
	assert.Equal(t, 30*time.Millisecond, o.RTT)
	assert.Equal(t, 50.0, o.ConnMBs)
	assert.Equal(t, 500.0, o.LinkMBs)
	assert.True(t, o.Progress)
	assert.Equal(t, 6, o.Pairs)

	d, err := parse(t, "demo")
	require.NoError(t, err)
	assert.Equal(t, []string{"seq-n", "small"}, d.Workloads)
	assert.Zero(t, d.Pairs, "the demo shows epochs, not the targets")
	assert.Less(t, datasetSpec(d).TotalBytes(), int64(400<<20), "the demo's dataset stays small")
}

func TestParseFlags(t *testing.T) {
	o, err := parse(t, "run", "--store", "s3", "--large-size", "64MiB", "--record-size=1MiB", "--workloads", "random, walk",
		"--ferry-args", `--memory-limit 256MiB --log-file "/tmp/a b.log"`, "--target-dir", "/mnt/x", "--no-progress",
		"--rtt", "10ms", "--accelerators", "3", "--mlperf-scale", "0.5", "--pairs", "2")
	require.NoError(t, err)
	assert.Equal(t, "s3", o.Store)
	assert.Equal(t, int64(64<<20), o.LargeSize)
	assert.Equal(t, int64(1<<20), o.RecordSize)
	assert.Equal(t, []string{"random", "walk"}, o.Workloads)
	assert.Equal(t, []string{"--memory-limit", "256MiB", "--log-file", "/tmp/a b.log"}, o.FerryArgs)
	assert.Equal(t, "/mnt/x", o.TargetDir)
	assert.False(t, o.Progress)
	assert.Equal(t, 10*time.Millisecond, o.RTT)
	assert.Equal(t, 3, o.Accelerators)
	assert.Equal(t, 0.5, o.MLPerfScale)
	assert.Equal(t, 2, o.Pairs)
}

func TestParseErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"bogus"},
		{"run", "--store", "azure"},
		{"run", "--workloads", "seq-1,nope"},
		{"run", "--workloads", ","},
		{"run", "--large-size", "lots"},
		{"run", "--large-size", "0"},
		{"run", "--seq1-files", "9", "--large-files", "8"},
		{"run", "--streams", "0"},
		{"run", "--pairs", "5"},
		{"run", "--pairs", "-2"},
		{"run", "--record-size", "1GiB", "--shard-size", "1MiB"},
		{"run", "--mlperf-scale", "2"},
		{"run", "--ferry-args", "--cache-dir /x"},
		{"run", "--ferry-args", "--cache-dir=/x"},
		{"run", "--ferry-args", "--endpoint=http://elsewhere"},
		{"run", "--ferry-args", `"unterminated`},
		{"run", "stray"},
		{"generate"},
	} {
		_, err := parse(t, args...)
		assert.Error(t, err, "%q", args)
	}
	_, err := parse(t, "-h")
	assert.True(t, errors.Is(err, flag.ErrHelp))
}

func TestSplitArgs(t *testing.T) {
	for in, want := range map[string][]string{
		"":                      nil,
		"  ":                    nil,
		"-a  b\t c":             {"-a", "b", "c"},
		`--x 'a b' "c \"d\""`:   {"--x", "a b", `c "d"`},
		`''`:                    {""},
		`pre'fix 'post`:         {"prefix post"},
		`--log-file="/tmp/a b"`: {"--log-file=/tmp/a b"},
		`"back\\slash" 'it\'`:   {`back\slash`, `it\`},
	} {
		got, err := splitArgs(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := splitArgs(`'open`)
	assert.Error(t, err)
}

func TestDatasetSpecFollowsWorkloads(t *testing.T) {
	o, err := parse(t, "run", "--workloads", "random")
	require.NoError(t, err)
	s := datasetSpec(o)
	require.Len(t, s.Groups, 1)
	assert.Equal(t, "shards", s.Groups[0].Dir)

	o, err = parse(t, "run", "--workloads", "resnet50", "--mlperf-scale", "0.5", "--resnet50-files", "2")
	require.NoError(t, err)
	s = datasetSpec(o)
	require.Len(t, s.Groups, 1)
	// 1251 records of 115 KiB halved (rounded to 4 KiB) per file.
	assert.Equal(t, int64(1251*(56<<10)), s.Groups[0].Size)
	assert.Equal(t, 2, s.Groups[0].Count)

	a, b := specID(s), specID(datasetSpec(o))
	assert.Equal(t, a, b, "the same options name the same dataset")
	o.Seed++
	assert.NotEqual(t, a, specID(datasetSpec(o)))
}

func TestBuildWorkloadsNames(t *testing.T) {
	o, err := parse(t, "run", "--streams", "6", "--unet3d-files", "0")
	require.NoError(t, err)
	ws := buildWorkloads(o, datasetSpec(o), Limits{}.Link)
	var names []string
	for _, w := range ws {
		names = append(names, w.Name)
	}
	assert.Equal(t, []string{"seq-1", "seq-6", "random-512k", "small-128k", "walk", "ls-lr", "resnet50", "cosmoflow", "aio-libaio", "aio-uring", "aio-psync-16"}, names)
	assert.Equal(t, int64(o.Seq1Files)*o.LargeSize, ws[0].Expect)
	assert.Equal(t, int64(o.LargeFiles)*o.LargeSize, ws[1].Expect)
}

func TestCommandLine(t *testing.T) {
	assert.Equal(t, []string{"go", "run", "./tools/bench", "demo"}, commandLine([]string{"/tmp/go-build123/b001/exe/bench", "demo"}))
	assert.Equal(t, []string{"./bench", "run"}, commandLine([]string{"./bench", "run"}))
}

func TestSizeLabel(t *testing.T) {
	assert.Equal(t, "512k", sizeLabel(512<<10))
	assert.Equal(t, "1m", sizeLabel(1<<20))
	assert.Equal(t, "1000", sizeLabel(1000))
}

func TestChecksCatchWrongBytes(t *testing.T) {
	o, err := parse(t, "run", "--workloads", "random,small", "--shards", "2", "--shard-size", "2MiB", "--records", "6",
		"--small-files", "3", "--small-size", "8KiB")
	require.NoError(t, err)
	spec := datasetSpec(o)
	dir := t.TempDir()
	require.NoError(t, spec.WriteDir(dir, nil))
	ws := buildWorkloads(o, spec, Limits{}.Link)
	require.Len(t, ws, 2)
	for _, w := range ws {
		require.NoError(t, w.Check(dir), w.Name)
		r, err := w.Run(t.Context(), dir, nil)
		require.NoError(t, err, w.Name)
		assert.Equal(t, w.Expect, r.Bytes, w.Name)
	}
	// One flipped byte in every file is caught.
	for _, f := range spec.Files() {
		p := filepath.Join(dir, f.Name)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		for i := range b {
			b[i] ^= 0xff
		}
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
	for _, w := range ws {
		assert.Error(t, w.Check(dir), w.Name)
	}
}
