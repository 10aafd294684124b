package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// ScaleRow is one pass of `bench scale` over one tree.
type ScaleRow struct {
	Files   int     `json:"files"`  // files in the tree (objects, for the flat directory)
	Source  string  `json:"source"` // SrcLocal, SrcFile, SrcGCS, SrcFlat, SrcFlatL
	Phase   string  `json:"phase"`  // local, cold, warm, remount
	Pass    string  `json:"pass"`   // find, ls -lR, read, ls -l
	Ops     int64   `json:"ops"`    // lines printed, or files read
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	// CPU seconds of ferry and of the emulator during the pass.
	FerryCPU float64 `json:"ferry_cpu_s,omitempty"`
	StoreCPU float64 `json:"store_cpu_s,omitempty"`
	// Peaks during the pass: ferry's VmHWM (reset before it), the Go heap
	// in use and ferry_metadata_bytes as scraped every 250 ms; the
	// kernel's inodes ferry holds and metadata evictions so far, at the end.
	PeakRSS       int64  `json:"peak_rss"`
	PeakHeap      int64  `json:"peak_heap"`
	MetadataBytes int64  `json:"metadata_bytes"`
	Inodes        int64  `json:"inodes"`
	Evictions     int64  `json:"metadata_evictions"`
	Verified      string `json:"verified,omitempty"`
	Error         string `json:"error,omitempty"`
}

// FilesPerSecond is the tree's files over the pass's time.
func (r ScaleRow) FilesPerSecond() float64 { return ratio(float64(r.Files), r.Seconds) }

// cpuPerFile is CPU seconds as µs per file of the tree.
func (r ScaleRow) cpuPerFile(cpu float64) float64 { return ratio(cpu*1e6, float64(r.Files)) }

func (r ScaleRow) line() string {
	s := fmt.Sprintf("%8d files  %-7s %-8s %-7s %9.0f files/s  %6.1f s", r.Files, r.Source, r.Phase, r.Pass, r.FilesPerSecond(), r.Seconds)
	if r.PeakRSS > 0 {
		s += fmt.Sprintf("  ferry %.0f µs/file, peak RSS %.0f MiB, heap %.0f MiB, metadata %.0f MiB, %d inodes",
			r.cpuPerFile(r.FerryCPU), float64(r.PeakRSS)/mib, float64(r.PeakHeap)/mib, float64(r.MetadataBytes)/mib, r.Inodes)
	}
	if r.StoreCPU > 0 {
		s += fmt.Sprintf(", emulator %.0f µs/file", r.cpuPerFile(r.StoreCPU))
	}
	if r.Verified != "" && r.Verified != "ok" {
		s += "  bytes " + r.Verified
	}
	if r.Error != "" {
		s += "  ERROR " + oneLine(r.Error)
	}
	return s
}

// ScaleMount is one start of ferry: on an empty cache (cold) or on the
// cache the previous ferry filled (remount).
type ScaleMount struct {
	Files  int    `json:"files"`
	Source string `json:"source"`
	Phase  string `json:"phase"`
	// MountSeconds is from exec until the kernel lists the mount;
	// FirstReadSeconds from then until one file was read whole.
	MountSeconds     float64 `json:"mount_s"`
	FirstReadSeconds float64 `json:"first_read_s"`
	RSS              int64   `json:"rss_after_first_read"`
	// CacheBytes is the cache directory's allocated blocks after this
	// ferry's passes.
	CacheBytes int64  `json:"cache_bytes"`
	Error      string `json:"error,omitempty"`
}

// ScaleReport is what `bench scale` writes.
type ScaleReport struct {
	Command         []string        `json:"command"`
	Started         time.Time       `json:"started"`
	Duration        float64         `json:"duration_s"`
	GenerateSeconds float64         `json:"generate_s"`
	Machine         Machine         `json:"machine"`
	FerryTree       string          `json:"ferry_tree,omitempty"`
	LoadStart       string          `json:"load_start,omitempty"`
	LoadEnd         string          `json:"load_end,omitempty"`
	Options         ScaleOptions    `json:"options"`
	MemoryLimit     int64           `json:"memory_limit"`
	Trees           []Tree          `json:"trees"`
	Link            *LinkJSON       `json:"link,omitempty"`
	Rows            []ScaleRow      `json:"rows"`
	Mounts          []ScaleMount    `json:"mounts"`
	Targets         []ClusterTarget `json:"targets"`
	Notes           []string        `json:"notes,omitempty"`
}

// todayCPUPerFile is issue 31's measured cost of a cold small file
// through ferry at 300K files, µs; the target is half of it.
const todayCPUPerFile = 270

// rssSlack is what peak RSS may exceed --memory-limit by.
const rssSlack = 256 << 20

// row returns the first error-free row.
func (rep *ScaleReport) row(files int, src, phase, pass string) (ScaleRow, bool) {
	for _, r := range rep.Rows {
		if r.Files == files && r.Source == src && r.Phase == phase && r.Pass == pass && r.Error == "" {
			return r, true
		}
	}
	return ScaleRow{}, false
}

func (rep *ScaleReport) mount(files int, src, phase string) (ScaleMount, bool) {
	for _, m := range rep.Mounts {
		if m.Files == files && m.Source == src && m.Phase == phase && m.Error == "" {
			return m, true
		}
	}
	return ScaleMount{}, false
}

func (rep *ScaleReport) target(what, want, got string, met bool) {
	rep.Targets = append(rep.Targets, ClusterTarget{What: what, Want: want, Got: got, Met: met})
}

// derive checks issue 31's targets on the file:// rows: the largest
// count against the smallest, and against local disk.
func (rep *ScaleReport) derive() {
	rep.Targets = nil
	counts := rep.Options.Files
	if len(counts) == 0 {
		return
	}
	lo, hi := counts[0], counts[len(counts)-1]
	if len(counts) > 1 {
		for _, ph := range []string{PhaseCold, PhaseWarm, PhaseRemount} {
			a, okA := rep.row(hi, SrcFile, ph, PassRead)
			b, okB := rep.row(lo, SrcFile, ph, PassRead)
			if okA && okB {
				v := ratio(a.FilesPerSecond(), b.FilesPerSecond())
				rep.target(fmt.Sprintf("%s read files/s at %s / at %s", ph, countLabel(hi), countLabel(lo)), ">= 90%",
					fmt.Sprintf("%.1f%% (%.0f / %.0f)", 100*v, a.FilesPerSecond(), b.FilesPerSecond()), v >= 0.9)
			}
		}
	}
	if w, ok := rep.row(hi, SrcFile, PhaseWarm, PassRead); ok {
		if l, ok := rep.row(hi, SrcLocal, PhaseLocal, PassRead); ok {
			v := ratio(w.FilesPerSecond(), l.FilesPerSecond())
			rep.target(fmt.Sprintf("warm read / local disk at %s", countLabel(hi)), ">= 40%",
				fmt.Sprintf("%.0f%% (%.0f / %.0f files/s)", 100*v, w.FilesPerSecond(), l.FilesPerSecond()), v >= 0.4)
		}
	}
	bound := rep.MemoryLimit + rssSlack
	var peak ScaleRow
	for _, r := range rep.Rows {
		if r.Files == hi && (r.Source == SrcFile) && r.PeakRSS > peak.PeakRSS {
			peak = r
		}
	}
	if peak.PeakRSS > 0 {
		rep.target(fmt.Sprintf("peak RSS at %s, any pass", countLabel(hi)), fmt.Sprintf("<= %.0f MiB (--memory-limit + 256 MiB)", float64(bound)/mib),
			fmt.Sprintf("%.0f MiB (%s %s)", float64(peak.PeakRSS)/mib, peak.Phase, peak.Pass), peak.PeakRSS <= bound)
	}
	if m, ok := rep.mount(hi, SrcFile, PhaseRemount); ok {
		rep.target(fmt.Sprintf("restart on the cache of %s files: mount returns", countLabel(hi)), "<= 2 s",
			fmt.Sprintf("%.2f s", m.MountSeconds), m.MountSeconds <= 2)
		rep.target("restart: first read served after the mount returns", "<= 1 s",
			fmt.Sprintf("%.3f s", m.FirstReadSeconds), m.FirstReadSeconds <= 1)
	}
	if c, ok := rep.row(hi, SrcFile, PhaseCold, PassRead); ok {
		v := c.cpuPerFile(c.FerryCPU)
		got := fmt.Sprintf("%.0f µs", v)
		if len(rep.Trees) > 0 && rep.Trees[len(rep.Trees)-1].Tiny == 0 {
			got += " (files of ~110 KB, each also written to the cache; the issue's 270 µs was for 512 B files)"
		}
		rep.target(fmt.Sprintf("ferry CPU per cold file read at %s", countLabel(hi)), fmt.Sprintf("<= %d µs (half of %d)", todayCPUPerFile/2, todayCPUPerFile),
			got, v <= todayCPUPerFile/2)
	}
	for _, ph := range []string{PhaseCold, PhaseWarm} {
		if r, ok := rep.row(rep.Options.Flat, SrcFlat, ph, PassLsL); ok {
			rep.target(fmt.Sprintf("ls -l of a flat %s-object directory, %s: peak RSS", countLabel(r.Files), ph), fmt.Sprintf("<= %.0f MiB", float64(bound)/mib),
				fmt.Sprintf("%.0f MiB", float64(r.PeakRSS)/mib), r.PeakRSS > 0 && r.PeakRSS <= bound)
		}
	}
}

// countLabel prints a count as the curve names it: 10K, 100K, 1.28M.
func countLabel(n int) string {
	switch {
	case n == imagenetFiles:
		return "1.28M"
	case n >= 1e6 && n%1e6 == 0:
		return fmt.Sprintf("%dM", n/1e6)
	case n >= 1e6 && n%1e5 == 0:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3 && n%1e3 == 0:
		return fmt.Sprintf("%dK", n/1e3)
	}
	return fmt.Sprintf("%d", n)
}

// write prints the report and, with out, writes README.md, results.json
// and the chart there.
func (rep *ScaleReport) write(stdout io.Writer, out string) error {
	fmt.Fprintln(stdout)
	if err := rep.WriteMarkdown(stdout); err != nil {
		return err
	}
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var errs []error
	for name, write := range map[string]func(io.Writer) error{"README.md": rep.WriteMarkdown, "results.json": rep.WriteJSON, "files-per-second.svg": rep.WriteChart} {
		f, err := os.Create(filepath.Join(out, name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, write(f), f.Close())
	}
	return errors.Join(errs...)
}

// WriteJSON writes the report, indented.
func (rep *ScaleReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
