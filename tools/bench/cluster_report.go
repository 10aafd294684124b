package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// ClusterRow is one timed read of the whole dataset in `bench cluster`.
type ClusterRow struct {
	Setup string `json:"setup"` // SetupDirect, SetupOrigin or SetupTier
	Phase string `json:"phase"` // cold, warm, or prewarm (remote.cache)
	// Node is 1..N, N+1 for the tier's reference node; 0 for rows
	// without a ferry.
	Node int `json:"node,omitempty"`
	// Start is when the read began, seconds from the run's start (the
	// request traces' epoch).
	Start   float64 `json:"start_s"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`

	// What reached the origin (through the emulated link) and the tier.
	OriginRequests int64         `json:"origin_requests"`
	OriginBytes    int64         `json:"origin_bytes"`
	Origin         *TraceSummary `json:"origin_trace,omitempty"`
	TierRequests   int64         `json:"tier_requests,omitempty"`
	TierBytes      int64         `json:"tier_bytes,omitempty"`
	Tier           *TraceSummary `json:"tier_trace,omitempty"`

	// CPU seconds during the row: the node's ferry, the tier (the one
	// weed server process) and the origin emulator.
	FerryCPU  float64 `json:"ferry_cpu_s"`
	TierCPU   float64 `json:"tier_cpu_s"`
	OriginCPU float64 `json:"origin_cpu_s"`

	Verified string `json:"verified,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Rate is bytes per second.
func (r ClusterRow) Rate() float64 { return ratio(float64(r.Bytes), r.Seconds) }

// line is the row as the run logs it.
func (r ClusterRow) line() string {
	s := fmt.Sprintf("%-12s %-7s node %d  %7.1f MiB/s  origin %4d req %7.1f MiB", r.Setup, r.Phase, r.Node, r.Rate()/mib, r.OriginRequests, float64(r.OriginBytes)/mib)
	if r.Tier != nil {
		s += fmt.Sprintf("  tier %4d req %7.1f MiB (p50 %.2fs, max %.2fs, %d >= 1s)", r.TierRequests, float64(r.TierBytes)/mib, r.Tier.P50, r.Tier.Max, r.Tier.Slow)
	}
	s += fmt.Sprintf("  cpu ferry %.1fs tier %.1fs origin %.1fs", r.FerryCPU, r.TierCPU, r.OriginCPU)
	if r.Verified != "" && r.Verified != "ok" {
		s += "  bytes " + r.Verified
	}
	if r.Error != "" {
		s += "  ERROR " + r.Error
	}
	return s
}

// ClusterReport is what `bench cluster` writes.
type ClusterReport struct {
	Command      []string        `json:"command"`
	Started      time.Time       `json:"started"`
	Duration     float64         `json:"duration_s"`
	Machine      Machine         `json:"machine"`
	FerryTree    string          `json:"ferry_tree,omitempty"`
	LoadStart    string          `json:"load_start,omitempty"`
	LoadEnd      string          `json:"load_end,omitempty"`
	Options      ClusterOptions  `json:"options"`
	Link         *LinkJSON       `json:"link"`
	DatasetBytes int64           `json:"dataset_bytes"`
	Rows         []ClusterRow    `json:"rows"`
	Targets      []ClusterTarget `json:"targets"`
	Notes        []string        `json:"notes,omitempty"`
}

// ClusterTarget is one of issue 35's targets, checked on this run.
type ClusterTarget struct {
	What string `json:"what"`
	Got  string `json:"got"`
	Want string `json:"want"`
	Met  bool   `json:"met"`
}

func clusterTargetsMarkdown(ts []ClusterTarget) string {
	return verdictsMarkdown("\nTargets of issue 35 (scale-out on SeaweedFS), on this run:\n\n", ts, "yes", "no")
}

// verdictsMarkdown is a table of ts after intro, each marked met or notMet;
// "" when there is none.
func verdictsMarkdown(intro string, ts []ClusterTarget, met, notMet string) string {
	if len(ts) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(intro + "| target | this run | wanted | met |\n|---|---|---|---|\n")
	for _, t := range ts {
		mark := notMet
		if t.Met {
			mark = met
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.What, t.Got, t.Want, mark)
	}
	return b.String()
}

// find returns the first row of setup, phase and node.
func (rep *ClusterReport) find(setup, phase string, node int) (ClusterRow, bool) {
	for _, r := range rep.Rows {
		if r.Setup == setup && r.Phase == phase && r.Node == node && r.Error == "" {
			return r, true
		}
	}
	return ClusterRow{}, false
}

// derive checks issue 35's targets against the rows.
func (rep *ClusterReport) derive() {
	rep.Targets = nil
	n := rep.Options.Nodes
	var origin int64
	tierRows := 0
	for _, r := range rep.Rows {
		if r.Setup == SetupTier {
			origin += r.OriginBytes
			tierRows++
		}
	}
	if tierRows > 0 {
		amp := ratio(float64(origin), float64(rep.DatasetBytes))
		rep.Targets = append(rep.Targets, ClusterTarget{What: "origin bytes with the tier, all nodes", Want: "<= 1.10 x dataset",
			Got: fmt.Sprintf("%.2f x (%.0f of %.0f MiB)", amp, float64(origin)/mib, float64(rep.DatasetBytes)/mib), Met: amp <= 1.10})
	}
	if ref, ok := rep.find(SetupTier, PhaseCold, n+1); ok {
		var got []string
		pass, worst := true, 0.0
		for node := 2; node <= n; node++ {
			r, ok := rep.find(SetupTier, PhaseCold, node)
			v := ratio(r.Rate(), ref.Rate())
			if !ok || v < 0.8 {
				pass = false
			}
			if node == 2 || v < worst {
				worst = v
			}
			got = append(got, fmt.Sprintf("node %d %.0f%%", node, 100*v))
		}
		rep.Targets = append(rep.Targets, ClusterTarget{What: "nodes 2..N cold through the warm tier / one node on the warm tier", Want: ">= 80%",
			Got: fmt.Sprintf("%s (of %.0f MiB/s)", strings.Join(got, ", "), ref.Rate()/mib), Met: pass})
	}
	// ferry's direct cold read is the median of the no-tier nodes' (one
	// node's read moved by up to 40% between nodes of one run).
	t1, ok := rep.find(SetupTier, PhaseCold, 1)
	if rates := rep.coldRates(SetupOrigin); ok && len(rates) > 0 {
		direct := median(rates)
		v := ratio(t1.Rate(), direct)
		got := fmt.Sprintf("%.0f%% (%.0f of %.0f MiB/s, the no-tier nodes' median)", 100*v, t1.Rate()/mib, direct/mib)
		if lo, hi := slices.Min(rates), slices.Max(rates); hi > lo {
			got += fmt.Sprintf("; %.0f%% to %.0f%% of their spread, %.0f to %.0f MiB/s", 100*ratio(t1.Rate(), hi), 100*ratio(t1.Rate(), lo), lo/mib, hi/mib)
		}
		rep.Targets = append(rep.Targets, ClusterTarget{What: "node 1 cold through the tier / ferry cold from the origin", Want: ">= 70%",
			Got: got, Met: v >= 0.7})
	}
}

// coldRates are the cold rates of nodes 1..N of setup.
func (rep *ClusterReport) coldRates(setup string) []float64 {
	var rates []float64
	for _, r := range rep.Rows {
		if r.Setup == setup && r.Phase == PhaseCold && r.Node > 0 && r.Node <= rep.Options.Nodes && r.Error == "" {
			rates = append(rates, r.Rate())
		}
	}
	return rates
}

// WriteMarkdown prints the header, the rows and the targets.
func (rep *ClusterReport) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Command: `%s`\n\n", shellJoin(rep.Command))
	b.WriteString(rep.Machine.markdownLine("origin, tier and caches"))
	if rep.FerryTree != "" {
		fmt.Fprintf(&b, "ferry built from: %s\n\n", rep.FerryTree)
	}
	if rep.LoadStart != "" {
		fmt.Fprintf(&b, "Load average (1/5/15 min) at start: %s, at end: %s\n\n", rep.LoadStart, rep.LoadEnd)
	}
	o := rep.Options
	if l := rep.Link; l != nil {
		fmt.Fprintf(&b, "Origin: S3 (versitygw) behind an emulated link: %.0f ms round trip, %.0f MB/s per connection, %.0f MB/s in all. ",
			l.RTTms, l.PerConnBytesPS/1e6, l.TotalBytesPS/1e6)
	}
	wait := o.CacheWait
	if wait == "default" {
		wait = "SeaweedFS's default (by object size)"
	}
	fmt.Fprintf(&b, "Tier: SeaweedFS (`weed server`, one process) with the origin bucket under `remote.mount`, cacheWait %s, pre-warmed: %v. ", wait, o.Prewarm)
	fmt.Fprintf(&b, "Dataset: %d files of %.0f MiB (%.0f MiB), each node reading %d at a time front to back; %d nodes, each with its own cache and mount point, reading in turn.\n\n",
		o.Files, float64(o.FileSize)/mib, float64(rep.DatasetBytes)/mib, o.Streams, o.Nodes)
	if len(o.FerryArgs) > 0 || len(o.TierArgs) > 0 {
		fmt.Fprintf(&b, "ferry flags: `%s`; on the tier also `%s`\n\n", shellJoin(o.FerryArgs), shellJoin(o.TierArgs))
	}
	b.WriteString(clusterTable(rep.Rows, rep.Options.Nodes))
	b.WriteString(clusterTargetsMarkdown(rep.Targets))
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "\n- %s", n)
	}
	if len(rep.Notes) > 0 {
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// clusterTable renders the rows; empty cells mean "not applicable".
func clusterTable(rows []ClusterRow, nodes int) string {
	var b strings.Builder
	b.WriteString("| setup | node | phase | MiB/s | origin req | origin MiB | origin MiB read twice | tier req | tier MiB | tier req p50 / max s | tier req >= 1 s | CPU s ferry / tier / origin | notes |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, r := range rows {
		node := ""
		switch {
		case r.Node == nodes+1:
			node = "reference (empty cache, warm tier)"
		case r.Node > 0:
			node = fmt.Sprintf("%d", r.Node)
		}
		twice := ""
		if r.Origin != nil && r.Origin.Bytes > r.Origin.Distinct {
			twice = fmt.Sprintf("%.1f", float64(r.Origin.Bytes-r.Origin.Distinct)/mib)
		}
		tierReq, tierMiB, tierLat, slow := "", "", "", ""
		if r.Tier != nil {
			tierReq, tierMiB = fmt.Sprintf("%d", r.TierRequests), fmt.Sprintf("%.1f", float64(r.TierBytes)/mib)
			if r.Tier.Requests > 0 {
				tierLat, slow = fmt.Sprintf("%.2f / %.2f", r.Tier.P50, r.Tier.Max), fmt.Sprintf("%d", r.Tier.Slow)
			}
		}
		rate := fmt.Sprintf("%.1f", r.Rate()/mib)
		if r.Bytes == 0 {
			rate = fmt.Sprintf("(%.1f s)", r.Seconds)
		}
		var notes []string
		if r.Verified != "" {
			notes = append(notes, "bytes "+r.Verified)
		}
		if r.Error != "" {
			notes = append(notes, "ERROR: "+strings.ReplaceAll(oneLine(r.Error), "|", "/"))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %.1f | %s | %s | %s | %s | %s | %.1f / %.1f / %.1f | %s |\n",
			r.Setup, node, r.Phase, rate, r.OriginRequests, float64(r.OriginBytes)/mib, twice, tierReq, tierMiB, tierLat, slow,
			r.FerryCPU, r.TierCPU, r.OriginCPU, strings.Join(notes, "; "))
	}
	return b.String()
}

// WriteJSON writes the report, indented.
func (rep *ClusterReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
