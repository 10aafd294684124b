package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/tools/bench/netem"
)

func TestRowArithmetic(t *testing.T) {
	r := Row{Bytes: 100 * mib, Ops: 50, Seconds: 2, StoreBytes: 130 * mib}
	assert.InDelta(t, 50*mib, r.Rate(), 1e-9)
	assert.InDelta(t, 25, r.OpsRate(), 1e-9)
	assert.InDelta(t, 1.3, r.Amplification(), 1e-9)
	assert.False(t, r.metadataOnly())

	zero := Row{}
	assert.Zero(t, zero.Rate(), "no division by a zero duration")
	assert.Zero(t, zero.OpsRate())
	assert.Zero(t, zero.Amplification(), "no division by zero bytes")
	assert.True(t, Row{Ops: 3, Seconds: 1}.metadataOnly())
}

func TestRatio(t *testing.T) {
	assert.InDelta(t, 0.5, ratio(1, 2), 1e-12)
	assert.Zero(t, ratio(1, 0))
	assert.Zero(t, ratio(1, -1))
}

func TestLimits(t *testing.T) {
	l := Limits{Link: netem.Link{RTT: 30 * time.Millisecond, PerConn: 50e6, Total: 500e6}}
	assert.Equal(t, 500e6, l.Sequential())
	// 512 KiB: 30 ms + 524288/50e6 s = 40.48576 ms per record per reader.
	assert.InDelta(t, 4*524288/0.04048576, l.Random(4, 512<<10), 1)
	// 128 KiB files, 8 readers, one round trip each.
	assert.InDelta(t, 8*131072/0.030, l.SmallFiles(8, 128<<10), 1)
	// Enough readers hit the link cap.
	assert.Equal(t, 500e6, l.Random(1000, 512<<10))
	assert.Equal(t, 500e6, l.SmallFiles(10000, 128<<10))
	// No delay and no caps: no limit to compare with.
	assert.Zero(t, Limits{}.SmallFiles(8, 128<<10))
}

func sampleRows() []Row {
	pass := true
	return []Row{
		{Workload: "seq-1", Phase: PhaseLocal, Target: "local", Bytes: 1000 * mib, Seconds: 1},
		{Workload: "seq-1", Phase: PhaseCold, Target: "ferry", Bytes: 1000 * mib, Seconds: 2.5, StoreRequests: 10, StoreBytes: 1000 * mib, StoreInFlight: 9.54, StoreErrors: 2, Limit: 500e6, VsLimit: 0.84, FerryPeakRSS: 300 * mib, FerryCPU: 1, StoreCPU: 2, BenchCPU: 1},
		{Workload: "seq-1", Phase: PhaseWarm, Target: "ferry", Bytes: 1000 * mib, Seconds: 1.25},
		{Workload: "walk", Phase: PhaseLocal, Target: "local", Ops: 1000, Seconds: 0.1},
		{Workload: "walk", Phase: PhaseCold, Target: "ferry", Ops: 1000, Seconds: 1, StoreRequests: 3, FerryCPU: 0.5, StoreCPU: 0.5},
		{Workload: "unet3d", Phase: PhaseCold, Target: "ferry", Bytes: 10, Seconds: 1, AU: 0.5, PassAU: 0.9, Pass: new(bool), Accelerators: 2},
		{Workload: "unet3d", Phase: PhaseWarm, Target: "ferry", Bytes: 10, Seconds: 1, AU: 0.95, PassAU: 0.9, Pass: &pass, Accelerators: 2, Verified: "ok"},
		{Workload: "small-128k", Phase: PhaseCold, Target: "ferry", Error: "boom | bang"},
	}
}

func TestFillRatios(t *testing.T) {
	rows := sampleRows()
	fillRatios(rows)
	assert.Zero(t, rows[0].VsLocal, "the local row is the reference")
	assert.InDelta(t, 0.4, rows[1].VsLocal, 1e-9)
	assert.InDelta(t, 0.8, rows[2].VsLocal, 1e-9)
	assert.InDelta(t, 0.1, rows[4].VsLocal, 1e-9, "a walk compares ops/s")
	assert.Zero(t, rows[5].VsLocal, "no local row for unet3d")
}

func TestCostOf(t *testing.T) {
	c := costOf(sampleRows())
	require.NotNil(t, c)
	assert.InDelta(t, 1.5, c.FerryCPU, 1e-9)
	assert.InDelta(t, 2.5, c.StoreCPU, 1e-9)
	assert.InDelta(t, 1, c.BenchCPU, 1e-9)
	assert.InDelta(t, 2.5/5, c.StoreShare, 1e-9)
	assert.Nil(t, costOf([]Row{{Workload: "x"}}), "no store traffic, no cost line")
}

func TestMarkdown(t *testing.T) {
	rows := sampleRows()
	fillRatios(rows)
	rows = append(rows, Row{Workload: "seq-4", Phase: PhaseCold, Target: "ferry", Bytes: 1 << 30, Seconds: 1, StealCPU: 1.24})
	rep := &Report{
		Command: []string{"go", "run", "./tools/bench", "run", "--ferry-args", "--memory-limit 256MiB"},
		Machine: Machine{CPUs: 2, CPUModel: "Xeon", MemTotal: 24 << 30, Kernel: "6.1", GoVersion: "go1.26"},
		Store:   "S3 (versitygw)", Link: linkJSON(netem.Default), Rows: rows, Emulator: costOf(rows),
		Notes:  []string{"a note"},
		Folios: &FolioSizes{File: "large/00000.bin", Bytes: 64 << 20, LocalKiB: 2048, FerryKiB: 4},
	}
	var b bytes.Buffer
	require.NoError(t, rep.WriteMarkdown(&b))
	out := b.String()
	assert.Contains(t, out, "`go run ./tools/bench run --ferry-args '--memory-limit 256MiB'`")
	assert.Contains(t, out, "2 CPUs (Xeon), 24.0 GiB RAM, Linux 6.1")
	assert.Contains(t, out, "30 ms round trip, 50 MB/s per connection, 500 MB/s in all")
	assert.Contains(t, out, "| seq-1 | cold | 400.0 | 40% | 84% of 477 MiB/s | 10 | 1000.0 | 1.00 | 9.5 | 300 | 1.0 / 2.0 / 1.0 |  | 2 store requests cut short |")
	assert.Contains(t, out, "What each column means: docs/bench/README.md#reading-the-table.")
	assert.Contains(t, out, "| walk | cold | 1000 op/s | 10% |")
	assert.Contains(t, out, "| hypervisor took 1.2 CPU-s |", "steal time is noted")
	assert.NotContains(t, out, "hypervisor took 0", "small steal is not")
	assert.Contains(t, out, "50% fail (2 acc.)")
	assert.Contains(t, out, "95% pass (2 acc.) | bytes ok |")
	assert.Contains(t, out, "ERROR: boom / bang", "a pipe would break the table")
	assert.Contains(t, out, "the emulator took 50% of it")
	assert.Contains(t, out, "- a note")
	assert.Contains(t, out, "first 64 MiB of large/00000.bin in blocks (folios) of 2048 KiB on average from local disk, 4 KiB through ferry")
	// Every table line has the same number of cells.
	var cols int
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		n := strings.Count(line, "|")
		if cols == 0 {
			cols = n
		}
		assert.Equal(t, cols, n, line)
	}
}

// TestMarkdownDropsEmptyColumns: a column empty in every row (the AU
// without MLPerf, the notes of a clean run) is left out, header included.
func TestMarkdownDropsEmptyColumns(t *testing.T) {
	rows := demoRows()[:6]
	got := markdownTable(rows)
	lines := strings.Split(strings.TrimSpace(got), "\n")
	require.Len(t, lines, 2+len(rows))
	assert.Equal(t, "| workload | phase | MiB/s | vs local | store req | store MiB | store req in flight (mean) | CPU s ferry / store / bench |", lines[0])
	assert.Equal(t, "|---|---|--:|--:|--:|--:|--:|--:|", lines[1])
	for _, l := range lines {
		assert.Equal(t, 9, strings.Count(l, "|"), l)
	}
	assert.NotContains(t, got, "AU")
}

func TestJSONRoundTrip(t *testing.T) {
	rep := &Report{Command: []string{"bench", "run"}, Machine: Machine{CPUs: 2, CPUModel: "Xeon", MemTotal: 1 << 30, Kernel: "6.1"},
		Link: linkJSON(netem.Default), Rows: sampleRows()}
	var b bytes.Buffer
	require.NoError(t, rep.WriteJSON(&b))
	var got map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &got))
	m := got["machine"].(map[string]any)
	assert.Equal(t, float64(2), m["nproc"])
	assert.Equal(t, "Xeon", m["cpu_model"])
	assert.Equal(t, "6.1", m["kernel"])
	assert.Equal(t, []any{"bench", "run"}, got["command"])
	assert.Equal(t, 30.0, got["link"].(map[string]any)["rtt_ms"])
	rows := got["rows"].([]any)
	require.Len(t, rows, len(sampleRows()))
	first := rows[1].(map[string]any)
	assert.Equal(t, "cold", first["phase"])
	assert.Equal(t, float64(1000*mib), first["store_bytes"])
	assert.Equal(t, false, rows[5].(map[string]any)["pass"], "a failed AU is written, not omitted")
	assert.NotContains(t, got, "page_cache_folios", "not measured: not written")
}

func TestShellJoin(t *testing.T) {
	assert.Equal(t, `a 'b c' 'it'\''s' ''`, shellJoin([]string{"a", "b c", "it's", ""}))
}
