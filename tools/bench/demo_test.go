package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket/emulator"
	"ferry/tools/bench/netem"
)

// demoRows are a demo run's rows (figures of docs/bench/demo.md).
func demoRows() []Row {
	row := func(w, phase, target string, mibs float64, secs float64) Row {
		return Row{Workload: w, Phase: phase, Target: target, Bytes: int64(mibs * secs * mib), Seconds: secs}
	}
	rows := []Row{
		row("seq-4", PhaseLocal, "local", 1415.8, 1), row("small-128k", PhaseLocal, "local", 802.2, 1),
		row("seq-4", PhaseDirect, "store", 352.1, 1), row("small-128k", PhaseDirect, "store", 29.0, 1),
		row("seq-4", PhaseCold, "ferry", 222.4, 1), row("small-128k", PhaseCold, "ferry", 54.2, 1),
		row("seq-4", PhaseWarm, "ferry", 1114.2, 1), row("small-128k", PhaseWarm, "ferry", 522.4, 1),
		row("seq-4", PhaseRemount, "ferry", 713.0, 1),
		{Workload: "small-128k", Phase: PhaseRemount, Target: "ferry", Error: "boom"},
	}
	fillRatios(rows)
	return rows
}

func TestDemoSummary(t *testing.T) {
	rep := &Report{Options: defaultOptions("demo"), Link: linkJSON(netem.Default), Rows: demoRows()}
	got := demoSummary(rep)
	assert.Equal(t, `ferry demo: 224 MiB in 260 files read three times through ferry from the GCS emulator behind an emulated link (30 ms round trip, 50 MB/s per connection, 500 MB/s in all).

                              4 files of 48 MiB, 4 readers            256 files of 128 KiB, 8 readers
local disk                     1416 MiB/s                               802 MiB/s
the store alone, no ferry       352 MiB/s                                29 MiB/s
epoch 1, cold                   222 MiB/s =  63% of the store alone      54 MiB/s = 187% of the store alone
epoch 2, from ferry's cache    1114 MiB/s =  79% of local disk          522 MiB/s =  65% of local disk
epoch 3, after a remount        713 MiB/s =  50% of local disk        failed

Page cache dropped before every read; epoch 1 starts with an empty disk cache and is compared with the store alone (its own client, same link), epochs 2 and 3 with local disk.
Epoch 1 beat the store alone on 256 files of 128 KiB, 8 readers: ferry fetches the next files of a directory before they are opened, the client only when asked.
What each figure means, and the full benchmark: docs/bench/README.md. Every column of this run, and ferry's goals: add --full.
`, got)
	for _, word := range []string{"issue", "store-direct", "ampl", "in flight", "folio", "cut"} {
		assert.NotContains(t, strings.ToLower(got), word)
	}
	assert.NotContains(t, got, "Local disk was slower")

	// A disk busy with other work reads slower than the link: said, as
	// the shares of it mean little then.
	rep.Rows[0].Seconds = 100
	assert.Contains(t, demoSummary(rep), "\nLocal disk was slower than the link in this run: something else was using it")
}

// TestDemoRun runs the demo (a smaller dataset, the same steps and
// output) with stdout and stderr going to files, as in a CI log: the
// short table and its legend end stdout, no bar, "\r" or escape code
// reaches either file, and no word of ferry's own tracker ("issue") or
// the full table's ("store-direct", "folio") shows.
func TestDemoRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo: an emulator, a ferry build and real mounts")
	}
	if os.Geteuid() != 0 {
		t.Skip("the demo mounts FUSE and drops the page cache: run as root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE: %v", err)
	}
	if _, err := emulator.Binary(t.Context(), emulator.FakeGCS); err != nil {
		t.Skipf("the GCS emulator (fake-gcs-server) cannot be built here, and the demo needs it: %v", err)
	}
	dir := t.TempDir()
	o := defaultOptions("demo")
	o.WorkDir = filepath.Join(dir, "work")
	o.LargeSize, o.SmallFiles = 8<<20, 64
	stdout, err := os.Create(filepath.Join(dir, "stdout"))
	require.NoError(t, err)
	defer stdout.Close()
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	require.NoError(t, err)
	defer stderr.Close()

	err = execute(t.Context(), o, []string{"go", "run", "./tools/bench", "demo"}, stdout, stderr)
	out, _ := os.ReadFile(stdout.Name())
	log, _ := os.ReadFile(stderr.Name())
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out, log)
	t.Logf("stdout:\n%s", out)

	assert.Contains(t, string(out), "\nPage cache dropped before every read; epoch 1 starts with an empty disk cache")
	assert.Regexp(t, `(?m)^epoch 1, cold +\d+ MiB/s = +\d+% of the store alone`, string(out))
	assert.Regexp(t, `(?m)^epoch 3, after a remount +\d+ MiB/s = +\d+% of local disk`, string(out))
	assert.True(t, strings.HasSuffix(string(out), "docs/bench/README.md. Every column of this run, and ferry's goals: add --full.\n"),
		"the pointer to the docs ends the output")
	for name, text := range map[string]string{"stdout": string(out), "stderr": string(log)} {
		assert.NotContains(t, text, "\r", name)
		assert.NotContains(t, text, "\x1b", name)
		assert.NotContains(t, strings.ToLower(text), "issue", name)
		assert.NotContains(t, text, "folio", name)
	}
	assert.NotContains(t, string(out), "store-direct")
	assert.Contains(t, string(log), "epoch 2 (warm)", "the progress lines name the epochs")
	assert.False(t, mounted(t, o.WorkDir), "the demo leaves no mount behind")
}

// mounted reports whether anything under dir is mounted.
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	info, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	return strings.Contains(string(info), " "+dir)
}

// TestDemoWrite: the demo prints its short table alone, or with --full
// the full report first; either way the short table ends the output.
func TestDemoWrite(t *testing.T) {
	for _, full := range []bool{false, true} {
		o := defaultOptions("demo")
		o.Full = full
		rep := &Report{Options: o, Link: linkJSON(netem.Default), Rows: demoRows()}
		var out strings.Builder
		b := &bench{opts: o, report: rep}
		require.NoError(t, b.write(&out))
		s := out.String()
		short := strings.Index(s, "ferry demo: ")
		require.GreaterOrEqual(t, short, 0, s)
		assert.Equal(t, full, strings.Contains(s, "| workload | phase |"), "full %v", full)
		assert.Less(t, strings.LastIndex(s, "| workload | phase |"), short, "the short table comes last")
		assert.Equal(t, !full, strings.Contains(s, "add --full"), "full %v", full)
		assert.True(t, strings.HasSuffix(s, "docs/bench/README.md.\n") || !full, s)
	}
}
