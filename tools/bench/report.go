package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"ferry/tools/bench/netem"
)

// Phases of a workload, in the order they run.
const (
	PhaseLocal   = "local"   // the same bytes on local disk, page cache dropped
	PhaseCold    = "cold"    // fresh ferry cache, fresh mount, page cache dropped
	PhaseWarm    = "warm"    // same mount, ferry cache full, page cache dropped
	PhaseRemount = "remount" // new ferry process on the same cache dir
	// PhaseDirect reads the store through the emulated link with the
	// store's client library and no file system: the most this machine
	// and link deliver, so a cold ferry row can be judged against it.
	PhaseDirect = "store-direct"
)

// Row is one timed run of one workload in one phase.
type Row struct {
	Workload string  `json:"workload"`
	Phase    string  `json:"phase"`
	Target   string  `json:"target"` // "ferry", "local" or the --target-dir
	Bytes    int64   `json:"bytes"`
	Ops      int64   `json:"ops"`
	Seconds  float64 `json:"seconds"`

	// VsLocal is this row's rate over the local-disk row's rate of the
	// same workload (ops/s for the metadata walk); 0 when unknown.
	VsLocal float64 `json:"vs_local,omitempty"`
	// Limit is what the emulated link allows this workload (bytes/s), and
	// VsLimit the row's rate over it; cold rows only.
	Limit   float64 `json:"limit_bytes_per_s,omitempty"`
	VsLimit float64 `json:"vs_limit,omitempty"`

	// Store traffic during the row, from the proxy's counters.
	StoreRequests int64 `json:"store_requests"`
	StoreBytes    int64 `json:"store_bytes"`
	// StoreInFlight is the mean number of store requests in flight over
	// the row (proxy busy time / wall time): the parallelism ferry used.
	StoreInFlight float64 `json:"store_mean_in_flight"`
	// StoreErrors are requests that did not complete (mostly readahead
	// cancelled by ferry).
	StoreErrors int64 `json:"store_errors,omitempty"`

	// FerryPeakRSS is VmHWM of the ferry process over the row (bytes).
	FerryPeakRSS int64 `json:"ferry_peak_rss_bytes,omitempty"`
	// CPU seconds spent during the row by ferry, the store emulator, and
	// the benchmark process itself (the in-process proxy plus the reading
	// goroutines; the local rows show what reading alone costs it).
	FerryCPU float64 `json:"ferry_cpu_s"`
	StoreCPU float64 `json:"store_cpu_s"`
	BenchCPU float64 `json:"bench_cpu_s"`
	// StealCPU is CPU time the hypervisor took from this machine's virtual
	// CPUs during the row (/proc/stat steal, all CPUs): work that could not
	// run, which slows every process above without showing in their CPU.
	StealCPU float64 `json:"steal_cpu_s,omitempty"`

	// MLPerf rows: accelerator utilisation and the pass line.
	AU           float64 `json:"au,omitempty"`
	PassAU       float64 `json:"pass_au,omitempty"`
	Pass         *bool   `json:"pass,omitempty"`
	Accelerators int     `json:"accelerators,omitempty"`

	// Verified says whether a sample of the bytes read through this target
	// was compared with the generator after the row ("" when not checked).
	Verified string `json:"verified,omitempty"`
	Error    string `json:"error,omitempty"`
}

// stealNote is the steal time (CPU-s, all CPUs) from which a row says so
// in its notes: half a second of two CPUs' work is enough to move a
// row's rate on this kind of machine.
const stealNote = 0.5

// Rate is bytes per second.
func (r Row) Rate() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Bytes) / r.Seconds
}

// OpsRate is operations per second.
func (r Row) OpsRate() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Seconds
}

// metadataOnly rows move no bytes; their figure is ops/s.
func (r Row) metadataOnly() bool { return r.Bytes == 0 && r.Ops > 0 }

// Amplification is store bytes over application bytes (0 when no bytes
// were read by the application).
func (r Row) Amplification() float64 {
	if r.Bytes <= 0 {
		return 0
	}
	return float64(r.StoreBytes) / float64(r.Bytes)
}

// ratio is a/b, or 0 when b is not positive.
func ratio(a, b float64) float64 {
	if b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return 0
	}
	return a / b
}

// Limits is what the emulated link allows each kind of workload, the
// ceilings the cold rows are compared with (issue "readahead" states its
// targets against exactly these).
type Limits struct {
	Link netem.Link
}

// Sequential: any number of streams is bounded by the link cap.
func (l Limits) Sequential() float64 { return l.Link.Total }

// Random: readers synchronous readers, each paying one round trip plus the
// transfer of one record on one connection, bounded by the link cap.
func (l Limits) Random(readers int, record int64) float64 {
	per := l.Link.RTT.Seconds()
	if l.Link.PerConn > 0 {
		per += float64(record) / l.Link.PerConn
	}
	return l.capped(float64(readers) * float64(record) / per)
}

// SmallFiles: readers readers each needing one round trip per file (the
// issue's definition; the transfer of 128 KiB adds ~8% at 50 MB/s).
func (l Limits) SmallFiles(readers int, size int64) float64 {
	return l.capped(float64(readers) * float64(size) / l.Link.RTT.Seconds())
}

func (l Limits) capped(v float64) float64 {
	if l.Link.Total > 0 && v > l.Link.Total {
		return l.Link.Total
	}
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0
	}
	return v
}

// Report is one run of the benchmark.
type Report struct {
	Command  []string  `json:"command"`
	Started  time.Time `json:"started"`
	Duration float64   `json:"duration_s"`
	Machine  Machine   `json:"machine"`
	// LoadStart and LoadEnd are /proc/loadavg before and after the run.
	LoadStart string `json:"loadavg_start,omitempty"`
	LoadEnd   string `json:"loadavg_end,omitempty"`
	Store     string `json:"store,omitempty"` // "s3 (versitygw v1.8.0)" ...
	// FerryTree is `git describe --always --dirty` of the tree ferry was
	// built from.
	FerryTree string        `json:"ferry_tree,omitempty"`
	Link      *LinkJSON     `json:"link,omitempty"`
	FerryArgs []string      `json:"ferry_args,omitempty"`
	Options   Options       `json:"options"`
	Rows      []Row         `json:"rows"`
	Notes     []string      `json:"notes,omitempty"`
	Emulator  *EmulatorCost `json:"emulator_cost,omitempty"`
	Targets   []Target      `json:"targets,omitempty"`
	Paired    []Paired      `json:"paired,omitempty"`
	// Folios is measured once per run, through a mount of its own (needs
	// root).
	Folios *FolioSizes `json:"page_cache_folios,omitempty"`
}

// Paired is a workload read warm, alternately on local disk and through
// ferry's full cache (page cache dropped before each read, the order
// swapped every pair). Each ratio compares neighbours in time, so the
// drift of the local disk's rate over a run largely cancels, and an
// advantage of going first or second does too.
type Paired struct {
	Workload string    `json:"workload"`
	Local    []float64 `json:"local_bytes_per_s"`
	Ferry    []float64 `json:"ferry_bytes_per_s"`
	Ratios   []float64 `json:"ratios"`
	Median   float64   `json:"median"`
	// StoreRequests made during ferry's reads: 0 when the cache served
	// them all. StoreBytes is what they carried: a few requests with
	// almost no bytes are metadata (a lookup after --metadata-ttl ran
	// out), not data fetched again.
	StoreRequests int64 `json:"store_requests"`
	StoreBytes    int64 `json:"store_bytes"`
	// Error: a read failed (the pairs stop there; the failed pair is not
	// in Ratios), or the sample of bytes checked through the mount after
	// the pairs was wrong.
	Error string `json:"error,omitempty"`
}

// pairedMarkdown renders the paired reads.
func pairedMarkdown(ps []Paired) string {
	if len(ps) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nWarm reads in pairs: each workload read again, alternately on local disk and through ferry (page cache dropped before each read; which goes first is swapped every pair). The warm goals use the median ratio.\n\n| workload | ferry / local MiB/s, pair by pair | ratios | median | store requests | store MiB |\n|---|---|---|--:|--:|--:|\n")
	for _, p := range ps {
		var rates, ratios []string
		for i := range p.Ratios {
			rates = append(rates, fmt.Sprintf("%.0f / %.0f", p.Ferry[i]/mib, p.Local[i]/mib))
			ratios = append(ratios, fmt.Sprintf("%.0f%%", 100*p.Ratios[i]))
		}
		med := fmt.Sprintf("%.0f%%", 100*p.Median)
		if p.Error != "" {
			med = "failed: " + oneLine(p.Error)
		} else if len(p.Ratios) >= 2 {
			// Pair i%2 == 0 read local disk first: the two orders apart.
			var first, second []float64
			for i, r := range p.Ratios {
				if i%2 == 0 {
					first = append(first, r)
				} else {
					second = append(second, r)
				}
			}
			med += fmt.Sprintf(" (local first %.0f%%, ferry first %.0f%%)", 100*median(first), 100*median(second))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %.1f |\n", p.Workload, strings.Join(rates, ", "), strings.Join(ratios, ", "), med, p.StoreRequests, float64(p.StoreBytes)/mib)
	}
	return b.String()
}

// median of xs (not modified); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// LinkJSON is netem.Link with units in the names.
type LinkJSON struct {
	RTTms          float64 `json:"rtt_ms"`
	PerConnBytesPS float64 `json:"per_conn_bytes_per_s"`
	TotalBytesPS   float64 `json:"total_bytes_per_s"`
}

func linkJSON(l netem.Link) *LinkJSON {
	return &LinkJSON{RTTms: float64(l.RTT) / float64(time.Millisecond), PerConnBytesPS: l.PerConn, TotalBytesPS: l.Total}
}

// EmulatorCost sums CPU over the rows that touched the store, so the
// reader sees how much of the machine the emulated remote took.
type EmulatorCost struct {
	FerryCPU float64 `json:"ferry_cpu_s"`
	StoreCPU float64 `json:"store_cpu_s"`
	BenchCPU float64 `json:"bench_cpu_s"`
	// StoreShare is StoreCPU over the three.
	StoreShare float64 `json:"store_share"`
}

// fillRatios sets VsLocal on every non-local row from the local row of the
// same workload.
func fillRatios(rows []Row) {
	local := map[string]Row{}
	for _, r := range rows {
		if r.Phase == PhaseLocal {
			local[r.Workload] = r
		}
	}
	for i, r := range rows {
		l, ok := local[r.Workload]
		if !ok || r.Phase == PhaseLocal || r.Phase == PhaseDirect || r.Error != "" {
			continue
		}
		if r.metadataOnly() {
			rows[i].VsLocal = ratio(r.OpsRate(), l.OpsRate())
		} else {
			rows[i].VsLocal = ratio(r.Rate(), l.Rate())
		}
	}
}

// costOf sums CPU over the ferry rows that used the store (cold rows and
// any other with store traffic).
func costOf(rows []Row) *EmulatorCost {
	var c EmulatorCost
	for _, r := range rows {
		if r.StoreRequests == 0 || r.Target != "ferry" {
			continue
		}
		c.FerryCPU += r.FerryCPU
		c.StoreCPU += r.StoreCPU
		c.BenchCPU += r.BenchCPU
	}
	if c.FerryCPU+c.StoreCPU+c.BenchCPU == 0 {
		return nil
	}
	c.StoreShare = c.StoreCPU / (c.FerryCPU + c.StoreCPU + c.BenchCPU)
	return &c
}

const mib = 1 << 20

// WriteMarkdown prints the table (and the header that says what it is).
func (rep *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Command: `%s`\n\n", shellJoin(rep.Command))
	b.WriteString(rep.Machine.markdownLine("data and cache"))
	if rep.FerryTree != "" && rep.Store != "" {
		fmt.Fprintf(&b, "ferry built from: %s\n\n", rep.FerryTree)
	}
	if rep.LoadStart != "" {
		fmt.Fprintf(&b, "Load average (1/5/15 min) at start: %s, at end: %s\n\n", rep.LoadStart, rep.LoadEnd)
	}
	if rep.Store != "" {
		fmt.Fprintf(&b, "Store: %s", rep.Store)
		if rep.Link != nil {
			fmt.Fprintf(&b, " behind an emulated link: %.0f ms round trip, %.0f MB/s per connection, %.0f MB/s in all",
				rep.Link.RTTms, rep.Link.PerConnBytesPS/1e6, rep.Link.TotalBytesPS/1e6)
		}
		b.WriteString("\n\n")
	}
	if len(rep.FerryArgs) > 0 {
		fmt.Fprintf(&b, "ferry flags: `%s`\n\n", shellJoin(rep.FerryArgs))
	}
	b.WriteString(markdownTable(rep.Rows))
	b.WriteString("\nWhat each column means: docs/bench/README.md#reading-the-table.\n")
	b.WriteString(targetsMarkdown(rep.Targets))
	b.WriteString(pairedMarkdown(rep.Paired))
	if c := rep.Emulator; c != nil {
		fmt.Fprintf(&b, "\nCPU over the ferry rows that touched the store: ferry %.1f s, store emulator %.1f s, bench process (proxy + readers) %.1f s; the emulator took %.0f%% of it.\n",
			c.FerryCPU, c.StoreCPU, c.BenchCPU, 100*c.StoreShare)
	}
	if f := rep.Folios; f != nil {
		fmt.Fprintf(&b, "\nThe kernel's page cache took the first %.0f MiB of %s in blocks (folios) of %d KiB on average from local disk, %d KiB through ferry. The kernel likely pays per block, so smaller ones cost ferry's readers more per byte than local disk's (see docs/notes/2026-12-01-cold-rows-folios.md).\n",
			float64(f.Bytes)/mib, f.File, f.LocalKiB, f.FerryKiB)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "\n- %s", n)
	}
	if len(rep.Notes) > 0 {
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// tableHeader names the columns of markdownTable, each with its unit.
var tableHeader = []string{"workload", "phase", "MiB/s", "vs local", "vs link limit", "store req", "store MiB",
	"store bytes per byte read", "store req in flight (mean)", "ferry peak RSS MiB", "CPU s ferry / store / bench", "AU", "notes"}

// markdownTable renders rows; an empty cell means "not applicable", and a
// column empty in every row is left out (the AU of runs without MLPerf).
// docs/bench/README.md says what each column is.
func markdownTable(rows []Row) string {
	cells := make([][]string, len(rows))
	for i, r := range rows {
		cells[i] = tableCells(r)
	}
	var keep []int
	for c := range tableHeader {
		for _, row := range cells {
			if row[c] != "" {
				keep = append(keep, c)
				break
			}
		}
	}
	line := func(cols []string) string {
		var out []string
		for _, c := range keep {
			out = append(out, cols[c])
		}
		return "| " + strings.Join(out, " | ") + " |\n"
	}
	var b strings.Builder
	b.WriteString(line(tableHeader))
	align := make([]string, len(tableHeader))
	for c := range align {
		align[c] = "--:"
	}
	align[0], align[1], align[len(align)-1] = "---", "---", "---"
	b.WriteString(strings.ReplaceAll(line(align), " ", ""))
	for _, row := range cells {
		b.WriteString(line(row))
	}
	return b.String()
}

// tableCells are r's cells, in tableHeader's order.
func tableCells(r Row) []string {
	rate := fmt.Sprintf("%.1f", r.Rate()/mib)
	if r.metadataOnly() {
		rate = fmt.Sprintf("%.0f op/s", r.OpsRate())
	}
	vsLimit := ""
	if r.VsLimit > 0 {
		vsLimit = fmt.Sprintf("%.0f%% of %.0f MiB/s", 100*r.VsLimit, r.Limit/mib)
	}
	store, storeMiB, ampl, inflight := "", "", "", ""
	if r.Phase != PhaseLocal && (r.Target == "ferry" || r.Target == "store") {
		store = fmt.Sprintf("%d", r.StoreRequests)
		storeMiB = fmt.Sprintf("%.1f", float64(r.StoreBytes)/mib)
		ampl = fmtRatio(r.Amplification())
		inflight = fmt.Sprintf("%.1f", r.StoreInFlight)
	}
	rss := ""
	if r.FerryPeakRSS > 0 {
		rss = fmt.Sprintf("%.0f", float64(r.FerryPeakRSS)/mib)
	}
	cpu := fmt.Sprintf("%.1f / %.1f / %.1f", r.FerryCPU, r.StoreCPU, r.BenchCPU)
	au := ""
	if r.Pass != nil {
		verdict := "fail"
		if *r.Pass {
			verdict = "pass"
		}
		au = fmt.Sprintf("%.0f%% %s (%d acc.)", 100*r.AU, verdict, r.Accelerators)
	}
	var notes []string
	if r.Verified != "" {
		notes = append(notes, "bytes "+r.Verified)
	}
	if r.StoreErrors > 0 {
		notes = append(notes, fmt.Sprintf("%d store requests cut short", r.StoreErrors))
	}
	if r.StealCPU >= stealNote {
		notes = append(notes, fmt.Sprintf("hypervisor took %.1f CPU-s", r.StealCPU))
	}
	if r.Error != "" {
		notes = append(notes, "ERROR: "+strings.ReplaceAll(r.Error, "|", "/"))
	}
	return []string{r.Workload, r.Phase, rate, fmtPct(r.VsLocal), vsLimit, store, storeMiB, ampl, inflight, rss, cpu, au, strings.Join(notes, "; ")}
}

func fmtPct(v float64) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}

func fmtRatio(v float64) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%.2f", v)
}

// WriteJSON writes the report, indented.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// shellJoin quotes arguments so the printed command can be pasted back.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
