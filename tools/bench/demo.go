package main

// The demo's last words: a short table that a newcomer reads in half a
// minute. Every figure carries its unit, every ratio says what it is a
// share of, and the full table (--full, --out) is where the rest is.

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
)

// demoLines are the short table's lines: a title, and the phase each
// shows. The epochs are compared with what bounds them: epoch 1 with the
// store read without ferry over the same link, the later ones with local
// disk.
var demoLines = []struct{ title, phase string }{
	{"local disk", PhaseLocal},
	{"the store alone, no ferry", PhaseDirect},
	{"epoch 1, cold", PhaseCold},
	{"epoch 2, from ferry's cache", PhaseWarm},
	{"epoch 3, after a remount", PhaseRemount},
}

// demoSummary is the short table of rep: a column per workload, a line
// per phase, then one line of legend and where to read more.
func demoSummary(rep *Report) string {
	var workloads []string
	for _, r := range rep.Rows {
		if !contains(workloads, r.Workload) {
			workloads = append(workloads, r.Workload)
		}
	}
	var b strings.Builder
	b.WriteString(demoHeadline(rep))
	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	head := []string{""}
	for _, w := range workloads {
		head = append(head, workloadTitle(w, rep.Options))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	var ahead []string // workloads whose epoch 1 beat the store alone
	slowDisk := false  // local disk slower than the link: busy with other work
	for _, w := range workloads {
		l, lok := phaseRow(rep.Rows, w, PhaseLocal)
		d, dok := phaseRow(rep.Rows, w, PhaseDirect)
		slowDisk = slowDisk || (lok && dok && l.Error == "" && d.Error == "" && l.Rate() < d.Rate())
	}
	for _, l := range demoLines {
		cells := []string{l.title}
		for _, w := range workloads {
			cell, beat := demoCell(rep.Rows, w, l.phase)
			cells = append(cells, cell)
			if beat {
				ahead = append(ahead, workloadTitle(w, rep.Options))
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	_ = tw.Flush()
	b.WriteString("\nPage cache dropped before every read; epoch 1 starts with an empty disk cache and is compared with the store alone (its own client, same link), epochs 2 and 3 with local disk.\n")
	if slowDisk {
		b.WriteString("Local disk was slower than the link in this run: something else was using it, and the shares of local disk say little. Run the demo again.\n")
	}
	if len(ahead) > 0 {
		fmt.Fprintf(&b, "Epoch 1 beat the store alone on %s: ferry fetches the next files of a directory before they are opened, the client only when asked.\n", strings.Join(ahead, " and "))
	}
	b.WriteString("What each figure means, and the full benchmark: docs/bench/README.md.")
	if !rep.Options.Full {
		b.WriteString(" Every column of this run, and ferry's goals: add --full.")
	}
	b.WriteString("\n")
	return b.String()
}

// demoHeadline says what was read, from where, over what.
func demoHeadline(rep *Report) string {
	s := datasetSpec(rep.Options)
	what := fmt.Sprintf("%s in %d files", humanize.IBytes(uint64(s.TotalBytes())), len(s.Files()))
	from := "the " + strings.ToUpper(rep.Options.Store) + " emulator"
	if l := rep.Link; l != nil {
		from += fmt.Sprintf(" behind an emulated link (%.0f ms round trip, %.0f MB/s per connection, %.0f MB/s in all)",
			l.RTTms, l.PerConnBytesPS/1e6, l.TotalBytesPS/1e6)
	}
	return fmt.Sprintf("ferry demo: %s read three times through ferry from %s.\n\n", what, from)
}

// demoCell is one workload in one phase: its rate, and for ferry's rows
// the share of what bounds it. beat: epoch 1 was faster than the store
// alone.
func demoCell(rows []Row, workload, phase string) (cell string, beat bool) {
	r, ok := phaseRow(rows, workload, phase)
	switch {
	case !ok:
		return "not run", false
	case r.Error != "":
		return "failed", false
	}
	cell = fmt.Sprintf("%5.0f MiB/s", r.Rate()/mib)
	if r.metadataOnly() {
		cell = fmt.Sprintf("%5.0f op/s", r.OpsRate())
	}
	switch phase {
	case PhaseCold:
		if d, ok := phaseRow(rows, workload, PhaseDirect); ok && d.Error == "" && d.Rate() > 0 {
			v := r.Rate() / d.Rate()
			cell += fmt.Sprintf(" = %3.0f%% of the store alone", 100*v)
			beat = v > 1.1 // well beyond the noise of one run
		}
	case PhaseWarm, PhaseRemount:
		if r.VsLocal > 0 {
			cell += fmt.Sprintf(" = %3.0f%% of local disk", 100*r.VsLocal)
		}
	}
	return cell, beat
}

// phaseRow is the row of workload in phase: local disk, the store alone,
// or ferry's.
func phaseRow(rows []Row, workload, phase string) (Row, bool) {
	for _, r := range rows {
		if r.Workload == workload && r.Phase == phase {
			return r, true
		}
	}
	return Row{}, false
}

// workloadTitle says what a workload reads, for a reader who has not met
// its name.
func workloadTitle(name string, o Options) string {
	size := func(n int64) string { return humanize.IBytes(uint64(n)) }
	switch name {
	case "seq-1":
		return fmt.Sprintf("%d files of %s, one reader", o.Seq1Files, size(o.LargeSize))
	case fmt.Sprintf("seq-%d", o.Streams):
		return fmt.Sprintf("%d files of %s, %d readers", o.LargeFiles, size(o.LargeSize), o.Streams)
	case "random-" + sizeLabel(o.RecordSize):
		return fmt.Sprintf("%d random records of %s, %d readers", o.Records, size(o.RecordSize), o.RandomReaders)
	case "small-" + sizeLabel(o.SmallSize):
		return fmt.Sprintf("%d files of %s, %d readers", o.SmallFiles, size(o.SmallSize), o.SmallReaders)
	case "walk":
		return "stat of every file"
	case "ls-lr":
		return fmt.Sprintf("ls -lR of %d files", o.SmallFiles)
	}
	return name // the MLPerf workloads are known by their names
}
