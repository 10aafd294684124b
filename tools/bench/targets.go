package main

import (
	"fmt"
	"strings"
)

// Target is one of ferry's goals (the figures its design sets for it),
// checked against this run's rows.
type Target struct {
	What  string  `json:"what"`
	Value float64 `json:"value"`
	Want  string  `json:"want"`
	Met   bool    `json:"met"`
	// Shown is Value as printed.
	Shown string `json:"shown"`
	// Direct is what the store-direct reader reached on the same
	// measure in this run (the machine's and emulator's ceiling for the
	// pattern), if it ran, and DirectValue the same as a number.
	Direct      string  `json:"store_direct,omitempty"`
	DirectValue float64 `json:"store_direct_value,omitempty"`
	// AtLeast is the goal's floor, for goals that are one.
	AtLeast float64 `json:"at_least,omitempty"`
}

// verdict is the met column: a goal missed where store-direct fell short
// of it too says so, and whether ferry came about as close (within a
// tenth of store-direct's figure), which makes the machine the limit.
func (t Target) verdict() string {
	switch {
	case t.Met:
		return "yes"
	case t.DirectValue <= 0 || t.DirectValue >= t.AtLeast:
		return "no"
	case t.Value >= 0.9*t.DirectValue:
		return fmt.Sprintf("no, nor did store-direct (%s): this machine was the limit", t.Direct)
	}
	return fmt.Sprintf("no; store-direct fell short too (%s)", t.Direct)
}

// findRow returns the first error-free row of a workload (by name prefix,
// "seq-" + streams etc.) and phase.
func findRow(rows []Row, workload, phase string) (Row, bool) {
	for _, r := range rows {
		if r.Workload == workload && r.Phase == phase && r.Target == "ferry" && r.Error == "" {
			return r, true
		}
	}
	return Row{}, false
}

// setDirect sets t's store-direct figures from workload's store-direct
// row (its ratio to the link limit), if there is one.
func setDirect(t *Target, rows []Row, workload string) {
	for _, r := range rows {
		if r.Workload == workload && r.Phase == PhaseDirect && r.Error == "" && r.VsLimit > 0 {
			t.Direct, t.DirectValue = fmt.Sprintf("%.0f%%", 100*r.VsLimit), r.VsLimit
			return
		}
	}
}

// warmTarget is ferry's warm goal for a workload, as a share of the
// local-disk rate.
func warmTarget(workload string, o Options) (float64, bool) {
	switch workload {
	case "seq-1", fmt.Sprintf("seq-%d", o.Streams):
		return 0.85, true
	case "random-" + sizeLabel(o.RecordSize):
		return 0.60, true
	case "small-" + sizeLabel(o.SmallSize):
		return 0.40, true
	}
	return 0, false
}

// findPaired returns the paired reads of a workload, if they ran.
func findPaired(ps []Paired, workload string) (Paired, bool) {
	for _, p := range ps {
		if p.Workload == workload {
			return p, true
		}
	}
	return Paired{}, false
}

// checkTargets compares the rows (and the paired warm reads, which the
// warm targets use when they ran) with ferry's goals; rows that did
// not run are skipped. memoryLimit is ferry's --memory-limit in bytes (0:
// unknown, the RSS target is skipped).
func checkTargets(rows []Row, paired []Paired, o Options, memoryLimit int64) []Target {
	var out []Target
	atLeast := func(what string, v, want float64) {
		shown := fmt.Sprintf("%.0f%%", 100*v)
		if v < want && shown == fmt.Sprintf("%.0f%%", 100*want) {
			shown = fmt.Sprintf("%.2f%%", 100*v) // 89.98% is not 90%
		}
		out = append(out, Target{What: what, Value: v, Want: fmt.Sprintf(">= %.0f%%", 100*want), Met: v >= want, Shown: shown, AtLeast: want})
	}
	atMost := func(what string, v, want float64, unit string) {
		out = append(out, Target{What: what, Value: v, Want: fmt.Sprintf("<= %.2f%s", want, unit), Met: v <= want, Shown: fmt.Sprintf("%.2f%s", v, unit)})
	}
	seqN := fmt.Sprintf("seq-%d", o.Streams)
	random := "random-" + sizeLabel(o.RecordSize)
	small := "small-" + sizeLabel(o.SmallSize)
	if r, ok := findRow(rows, "seq-1", PhaseCold); ok {
		atLeast("cold sequential, 1 stream, of the link cap", r.VsLimit, 0.85)
		setDirect(&out[len(out)-1], rows, "seq-1")
	}
	if r, ok := findRow(rows, seqN, PhaseCold); ok {
		atLeast(fmt.Sprintf("cold sequential, %d streams, of the link cap", o.Streams), r.VsLimit, 0.90)
		setDirect(&out[len(out)-1], rows, seqN)
		if memoryLimit > 0 {
			out = append(out, Target{What: fmt.Sprintf("peak RSS during the %d-stream cold read", o.Streams),
				Value: float64(r.FerryPeakRSS), Want: fmt.Sprintf("<= %d MiB (--memory-limit + 96 MiB)", (memoryLimit+96*mib)/mib),
				Met: r.FerryPeakRSS <= memoryLimit+96*mib, Shown: fmt.Sprintf("%d MiB", r.FerryPeakRSS/mib)})
		}
	}
	if r, ok := findRow(rows, random, PhaseCold); ok {
		atMost("cold random records: store bytes / application bytes", r.Amplification(), 1.3, "")
		atLeast(fmt.Sprintf("cold random records, %d readers, of one round trip + transfer each", o.RandomReaders), r.VsLimit, 0.90)
		setDirect(&out[len(out)-1], rows, random)
	}
	if r, ok := findRow(rows, small, PhaseCold); ok {
		// One request per file, plus the listing: a few requests for the
		// directory and one page per 1000 entries.
		extra, allowed := r.StoreRequests-r.Ops, 5+r.Ops/1000
		out = append(out, Target{What: "cold small files: store requests beyond one per file (the listing)",
			Value: float64(extra), Want: fmt.Sprintf("<= %d", allowed), Met: extra <= allowed,
			Shown: fmt.Sprintf("%d (%d for %d files)", extra, r.StoreRequests, r.Ops)})
		atLeast(fmt.Sprintf("cold small files, %d readers, of one round trip each", o.SmallReaders), r.VsLimit, 0.90)
		setDirect(&out[len(out)-1], rows, small)
	}
	for _, name := range []string{"seq-1", seqN, random, small} {
		want, _ := warmTarget(name, o)
		what := "warm " + name + " of local disk"
		r, rowOK := findRow(rows, name, PhaseWarm)
		p, pairOK := findPaired(paired, name)
		switch {
		case !rowOK:
			// A failed warm read is no figure (pairs never follow one).
		case pairOK && p.Error != "":
			out = append(out, Target{What: what, Want: fmt.Sprintf(">= %.0f%%", 100*want),
				Shown: fmt.Sprintf("pairs failed: %s; single read %.0f%%", oneLine(p.Error), 100*r.VsLocal)})
		case pairOK && len(p.Ratios) > 0:
			atLeast(what, p.Median, want)
			out[len(out)-1].Shown = fmt.Sprintf("%.0f%% (median of %d pairs: %s); single read %.0f%%",
				100*p.Median, len(p.Ratios), strings.Join(percents(p.Ratios), ", "), 100*r.VsLocal)
		default:
			atLeast(what, r.VsLocal, want)
		}
	}
	if t, ok := aioTarget(rows); ok {
		out = append(out, t)
	}
	for _, w := range []string{"unet3d", "resnet50", "cosmoflow"} {
		for _, phase := range []string{PhaseCold, PhaseWarm} {
			if r, ok := findRow(rows, w, phase); ok && r.Pass != nil {
				out = append(out, Target{What: fmt.Sprintf("%s %s, %d accelerator(s): AU", w, phase, r.Accelerators), Value: r.AU,
					Want: fmt.Sprintf(">= %.0f%%", 100*r.PassAU), Met: *r.Pass, Shown: fmt.Sprintf("%.0f%%", 100*r.AU)})
			}
		}
	}
	return out
}

// targetsMarkdown renders the checks.
func targetsMarkdown(ts []Target) string {
	if len(ts) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nferry's goals, on this run. store-direct: the same measure for the store's own client, with no file system, through the same emulated link in the same run: what this machine and emulator allow.\n\n| goal | this run | wanted | met | store-direct |\n|---|--:|---|---|--:|\n")
	over := false
	for _, t := range ts {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", t.What, t.Shown, t.Want, t.verdict(), t.Direct)
		over = over || (t.AtLeast > 0 && t.Value > 1)
	}
	if over {
		b.WriteString("\nA cold figure over 100%: ferry fetched files before their readers opened them (--read-ahead-files), which the limit, one round trip per file, does not count.\n")
	}
	return b.String()
}

// memoryLimitOf finds --memory-limit in ferry's arguments, else ferry's
// default (512 MiB, from `ferry --help`).
func memoryLimitOf(args []string) int64 {
	const ferryDefault = 512 << 20
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--memory-limit=")
		if !ok && a == "--memory-limit" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if ok {
			var n int64
			if err := (sizeFlag{&n}).Set(v); err == nil {
				return n
			}
			return 0
		}
	}
	return ferryDefault
}
