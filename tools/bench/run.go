package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"ferry/bucket/emulator"
	"ferry/progress"
	"ferry/tools/bench/dataset"
	"ferry/tools/bench/netem"
	"ferry/tools/bench/workload"
)

// bench is one invocation: options, the dataset, and what is running.
type bench struct {
	opts   Options
	spec   dataset.Spec
	link   netem.Link
	stderr io.Writer

	remote *Remote // nil with --target-dir
	ferry  *Ferry
	mounts int // mounts so far, to name their logs

	report     *Report
	bar        *progress.Bar // of the phase running, nil without one
	dropFailed bool
	// foliosTried: measureFolios ran (once per run, even if it failed).
	foliosTried bool
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.stderr, "bench: "+format+"\n", args...)
}

// dropCaches empties the kernel page cache (needs root), so every phase
// reads from where it claims to.
func (b *bench) dropCaches() {
	_ = exec.Command("sync").Run()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil && !b.dropFailed {
		b.dropFailed = true
		b.report.Notes = append(b.report.Notes, fmt.Sprintf("The page cache could NOT be dropped (%v): local and warm figures include page-cache hits. Run as root.", err))
		b.logf("cannot drop the page cache (%v); run as root for honest figures", err)
	}
}

// newBar is a progress bar on stderr for one phase: none with
// --no-progress, and none when stderr is not a terminal, so that a log
// file gets no "\r" or escape codes (package progress).
func (b *bench) newBar(desc string, total int64) workload.Progress {
	if !b.opts.Progress {
		return nil
	}
	b.bar = progress.New(progress.Config{Writer: b.stderr, Label: desc, Total: total, Clear: true})
	if b.bar == nil {
		return nil
	}
	return b.bar.Add
}

// finishBar removes the bar, if there is one.
func (b *bench) finishBar() {
	b.bar.Finish()
	b.bar = nil
}

// measure runs w once against root and fills the row with the store's and
// the processes' costs over exactly that run.
func (b *bench) measure(ctx context.Context, w Workload, phase, target, root string, m *Mount) Row {
	b.dropCaches()
	if m != nil {
		_ = resetPeakRSS(m.Pid)
	}
	var c0 netem.Counters
	var storeCPU0, ferryCPU0 time.Duration
	if b.remote != nil {
		c0 = b.remote.Proxy.Counters()
		storeCPU0, _ = procCPU(b.remote.StorePid())
	}
	if m != nil {
		ferryCPU0, _ = procCPU(m.Pid)
	}
	self0 := selfCPU()
	steal0, stealErr := stealCPU()
	wall0 := time.Now()

	row, err := w.Run(ctx, root, b.newBar(w.Name+", "+phaseLabel(phase), w.Expect))
	b.finishBar()

	wall := time.Since(wall0)
	row.BenchCPU = (selfCPU() - self0).Seconds()
	if t, err := stealCPU(); err == nil && stealErr == nil {
		row.StealCPU = (t - steal0).Seconds()
	}
	if b.remote != nil {
		c1 := b.remote.Proxy.Counters()
		row.StoreRequests = c1.Requests - c0.Requests
		row.StoreBytes = c1.BytesServed - c0.BytesServed
		row.StoreErrors = c1.Errors - c0.Errors
		row.StoreInFlight = ratio(float64(c1.Busy-c0.Busy), float64(wall))
		if t, err := procCPU(b.remote.StorePid()); err == nil {
			row.StoreCPU = (t - storeCPU0).Seconds()
		}
	}
	if m != nil {
		if t, err := procCPU(m.Pid); err == nil {
			row.FerryCPU = (t - ferryCPU0).Seconds()
		}
		row.FerryPeakRSS, _ = procPeakRSS(m.Pid)
	}
	row.Workload, row.Phase, row.Target = w.Name, phase, target
	if err != nil {
		row.Error = err.Error()
	}
	if (phase == PhaseCold && target == "ferry" || phase == PhaseDirect) && w.Limit > 0 {
		row.Limit = w.Limit
		row.VsLimit = ratio(row.Rate(), w.Limit)
	}
	if err == nil && b.opts.Verify && w.Check != nil && phase != PhaseLocal && phase != PhaseDirect {
		if cerr := w.Check(root); cerr != nil {
			row.Verified = "WRONG: " + cerr.Error()
		} else {
			row.Verified = "ok"
		}
	}
	b.printRow(row)
	b.report.Rows = append(b.report.Rows, row)
	return row
}

// phaseLabel is a phase as the progress lines name it.
func phaseLabel(phase string) string {
	switch phase {
	case PhaseLocal:
		return "local disk"
	case PhaseDirect:
		return "store alone"
	case PhaseCold:
		return "epoch 1 (cold)"
	case PhaseWarm:
		return "epoch 2 (warm)"
	case PhaseRemount:
		return "epoch 3 (remount)"
	}
	return phase
}

// printRow is a row's line on stderr as it ends: the rate, and for ferry
// what it cost.
func (b *bench) printRow(r Row) {
	rate := fmt.Sprintf("%8.1f MiB/s", r.Rate()/mib)
	if r.metadataOnly() {
		rate = fmt.Sprintf("%8.0f op/s ", r.OpsRate())
	}
	extra := ""
	if r.Target == "ferry" && r.Phase != PhaseLocal {
		extra = fmt.Sprintf("  store: %d requests, %.1f MiB, %.1f at a time", r.StoreRequests, float64(r.StoreBytes)/mib, r.StoreInFlight)
		if r.StoreErrors > 0 {
			extra += fmt.Sprintf(", %d cut short", r.StoreErrors)
		}
		extra += fmt.Sprintf("; ferry: peak RSS %.0f MiB; CPU-s: ferry %.1f, store %.1f, bench %.1f",
			float64(r.FerryPeakRSS)/mib, r.FerryCPU, r.StoreCPU, r.BenchCPU)
	}
	if r.StealCPU >= stealNote {
		extra += fmt.Sprintf("  steal %.1fs", r.StealCPU)
	}
	if r.Pass != nil {
		extra += fmt.Sprintf("  AU %.0f%%", 100*r.AU)
	}
	if r.Verified != "" && r.Verified != "ok" {
		extra += "  bytes " + r.Verified
	}
	if r.Error != "" {
		extra += "  ERROR " + r.Error
	}
	b.logf("%-14s %-17s %s%s", r.Workload, phaseLabel(r.Phase), rate, extra)
}

// prepareData writes the local copy (kept between runs of the same spec).
func (b *bench) prepareData(ctx context.Context) error {
	total := b.spec.TotalBytes()
	b.logf("dataset: %d files, %.0f MiB, local copy in %s", len(b.spec.Files()), float64(total)/mib, b.opts.DataDir)
	bar := b.newBar("writing local copy", total)
	err := b.spec.WriteDir(b.opts.DataDir, bar)
	b.finishBar()
	return err
}

// upload puts the dataset into the emulated store.
func (b *bench) upload(ctx context.Context) error {
	start := time.Now()
	bar := b.newBar("uploading", b.spec.TotalBytes())
	err := b.spec.Upload(ctx, b.remote.Writer, "", 4, bar)
	b.finishBar()
	if err != nil {
		return err
	}
	b.logf("uploaded %.0f MiB to %s in %v", float64(b.spec.TotalBytes())/mib, b.remote.Desc, time.Since(start).Round(time.Second))
	return nil
}

// mount starts ferry on a fresh mount point with cacheDir.
func (b *bench) mount(ctx context.Context, cacheDir string) (*Mount, error) {
	return b.mountAt(ctx, "mnt", cacheDir)
}

// mountAt starts ferry on WORK-DIR/name with cacheDir ("": no disk cache).
func (b *bench) mountAt(ctx context.Context, name, cacheDir string) (*Mount, error) {
	b.mounts++
	dir := filepath.Join(b.opts.WorkDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return b.ferry.Mount(ctx, dir, cacheDir, b.mounts)
}

// unmount unmounts and records a misbehaving exit as a note.
func (b *bench) unmount(m *Mount) {
	if err := m.Unmount(); err != nil {
		b.logf("unmount: %v", err)
		b.report.Notes = append(b.report.Notes, "unmount: "+oneLine(err.Error()))
	}
}

// runFerry runs groups of workloads through ferry: each group gets a fresh
// cache and mount (cold), is read again on it (warm), then on a new ferry
// process over the same cache (remount).
func (b *bench) runFerry(ctx context.Context, groups [][]Workload) error {
	for gi, group := range groups {
		cacheDir := filepath.Join(b.opts.WorkDir, fmt.Sprintf("cache-%02d", gi))
		if err := os.RemoveAll(cacheDir); err != nil {
			return err
		}
		err := func() error {
			m, err := b.mount(ctx, cacheDir)
			if err != nil {
				return err
			}
			defer b.unmount(m)
			for _, phase := range []string{PhaseCold, PhaseWarm} {
				for _, w := range group {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					b.measure(ctx, w, phase, "ferry", m.Dir, m)
				}
			}
			for _, w := range group {
				// Pairs only after a good warm read: they judge the warm
				// target, which a failed or wrong warm read has failed.
				if r, ok := findRow(b.report.Rows, w.Name, PhaseWarm); ok && (r.Verified == "" || r.Verified == "ok") {
					if _, ok := warmTarget(w.Name, b.opts); ok && b.opts.Pairs > 0 && ctx.Err() == nil {
						b.pair(ctx, w, m)
					}
				}
			}
			return nil
		}()
		if err != nil {
			return err
		}
		// Not in the demo: a newcomer's run has no use for the kernel's
		// page-cache folios, and it saves a mount and a 64 MiB read.
		if !b.foliosTried && ctx.Err() == nil && b.opts.Command != "demo" {
			b.foliosTried = true
			b.measureFolios(ctx)
		}
		err = func() error {
			m, err := b.mount(ctx, cacheDir)
			if err != nil {
				return err
			}
			defer b.unmount(m)
			for _, w := range group {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				b.measure(ctx, w, PhaseRemount, "ferry", m.Dir, m)
			}
			return nil
		}()
		if err != nil {
			return err
		}
		if du, err := dirUsage(cacheDir); err == nil {
			b.logf("ferry's disk cache (%s) holds %.0f MiB", cacheDir, float64(du)/mib)
		}
		_ = os.RemoveAll(cacheDir)
	}
	return nil
}

// measureFolios reads the first 64 MiB of the dataset's largest file from
// the local copy and through a ferry mount of its own, the page cache
// dropped before each, and records the mean size of the page-cache folios
// each read filled. That mount has an empty disk cache: a file held whole
// in the cache is opened with FUSE passthrough, whose pages are the cache
// file's on the cache volume, not FUSE's (until 2026-12-01 this read went
// through the group's mount, after its rows had filled the cache, and so
// measured the cache volume's folios). It runs once, after the first
// group's first mount is gone; the read fetches 64 MiB from the store.
func (b *bench) measureFolios(ctx context.Context) {
	var big dataset.File
	for _, f := range b.spec.Files() {
		if f.Size > big.Size {
			big = f
		}
	}
	if big.Size == 0 {
		return
	}
	b.dropCaches()
	local, err := pageCacheFolios(filepath.Join(b.opts.DataDir, big.Name), 64<<20)
	if err == nil {
		// A cache of its own, empty: the file is not whole in it at the
		// open, so the open is not passthrough; and the cache-only flags
		// --ferry-args may hold (--cache-size ...) still apply.
		cacheDir := filepath.Join(b.opts.WorkDir, "cache-folios")
		_ = os.RemoveAll(cacheDir)
		defer os.RemoveAll(cacheDir)
		var m *Mount
		if m, err = b.mountAt(ctx, "mnt-folios", cacheDir); err != nil {
			b.logf("page-cache folio sizes not measured: %v", err)
			b.report.Notes = append(b.report.Notes, "page-cache folio sizes not measured: "+oneLine(err.Error()))
			return
		}
		defer b.unmount(m)
		b.dropCaches()
		var ferry folioStats
		if ferry, err = pageCacheFolios(filepath.Join(m.Dir, big.Name), 64<<20); err == nil {
			b.report.Folios = &FolioSizes{File: big.Name, Bytes: local.pages * int64(os.Getpagesize()),
				LocalKiB: local.meanKiB(), FerryKiB: ferry.meanKiB()}
			b.logf("page-cache folios of %s: %d KiB on local disk, %d KiB through ferry", big.Name, local.meanKiB(), ferry.meanKiB())
			return
		}
	}
	b.logf("page-cache folio sizes not measured: %v", err)
}

// pair reads w warm b.opts.Pairs times on local disk and through ferry,
// alternately, with the page cache dropped before each read and the order
// swapped every pair (Pairs is even: each order runs equally often), and
// records the ratios (see Paired). It stops at the first failed read; the
// failed pair is not counted. Afterwards, as after every ferry row, a
// sample of the bytes is read through the mount and compared with the
// generator.
func (b *bench) pair(ctx context.Context, w Workload, m *Mount) {
	p := Paired{Workload: w.Name}
	b.logf("%s: %d warm reads in pairs, local disk and ferry alternately", w.Name, b.opts.Pairs)
	read := func(root string) (rate float64, store netem.Counters, ok bool) {
		b.dropCaches()
		var c0 netem.Counters
		if b.remote != nil {
			c0 = b.remote.Proxy.Counters()
		}
		r, err := w.Run(ctx, root, nil)
		if b.remote != nil {
			c1 := b.remote.Proxy.Counters()
			store.Requests, store.BytesServed = c1.Requests-c0.Requests, c1.BytesServed-c0.BytesServed
		}
		if err != nil {
			p.Error = fmt.Sprintf("%s: %v", root, err)
			return 0, store, false
		}
		return r.Rate(), store, true
	}
	for i := 0; i < b.opts.Pairs && ctx.Err() == nil; i++ {
		var local, ferry float64
		var store netem.Counters
		ok := true
		if i%2 == 0 {
			local, _, ok = read(b.opts.DataDir)
			if ok {
				ferry, store, ok = read(m.Dir)
			}
		} else {
			ferry, store, ok = read(m.Dir)
			if ok {
				local, _, ok = read(b.opts.DataDir)
			}
		}
		p.StoreRequests += store.Requests
		p.StoreBytes += store.BytesServed
		if !ok {
			break
		}
		p.Local, p.Ferry = append(p.Local, local), append(p.Ferry, ferry)
		p.Ratios = append(p.Ratios, ratio(ferry, local))
	}
	if err := ctx.Err(); err != nil && p.Error == "" {
		p.Error = err.Error()
	}
	if p.Error == "" && b.opts.Verify && w.Check != nil {
		if err := w.Check(m.Dir); err != nil {
			p.Error = "WRONG: " + err.Error()
		}
	}
	p.Median = median(p.Ratios)
	b.logf("%s: warm / local in pairs %v, median %.0f%%", w.Name, percents(p.Ratios), 100*p.Median)
	if p.Error != "" {
		b.logf("%s: pairs failed: %s", w.Name, p.Error)
	}
	b.report.Paired = append(b.report.Paired, p)
}

func percents(xs []float64) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%.0f%%", 100*x)
	}
	return out
}

// dirUsage is the disk space used under dir (allocated blocks, so sparse
// cache files count for what they hold).
func dirUsage(dir string) (int64, error) {
	out, err := exec.Command("du", "-sk", dir).Output()
	if err != nil {
		return 0, err
	}
	var kb int64
	_, err = fmt.Sscanf(string(out), "%d", &kb)
	return kb << 10, err
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}

// derive computes the figures that follow from the rows: ratios to
// local disk, the CPU summary and, for ferry runs, ferry's goals.
func (rep *Report) derive(ferry bool) {
	fillRatios(rep.Rows)
	rep.Emulator = costOf(rep.Rows)
	rep.Targets = nil
	if ferry {
		rep.Targets = checkTargets(rep.Rows, rep.Paired, rep.Options, memoryLimitOf(rep.Options.FerryArgs))
	}
	// The huge workload's rows are ferry's on a file:// source, with or
	// without a store in the run.
	rep.Targets = append(rep.Targets, hugeTargets(rep.Rows, memoryLimitOf(rep.Options.FerryArgs))...)
	rep.Targets = append(rep.Targets, epochsTargets(rep.Rows)...)
}

// render writes an earlier run's results again (after the report's format
// changed), from its results.json; the figures are not touched.
func render(o Options, stdout, stderr io.Writer) error {
	f, err := os.Open(o.From)
	if err != nil {
		return err
	}
	defer f.Close()
	var rep Report
	if err := json.NewDecoder(f).Decode(&rep); err != nil {
		return fmt.Errorf("%s: %w", o.From, err)
	}
	rep.derive(rep.Link != nil && rep.Options.TargetDir == "")
	b := &bench{opts: rep.Options, stderr: stderr, report: &rep}
	b.opts.Out = o.Out
	if rep.Link != nil {
		b.link = netem.Link{RTT: time.Duration(rep.Link.RTTms * float64(time.Millisecond)), PerConn: rep.Link.PerConnBytesPS, Total: rep.Link.TotalBytesPS}
	}
	return b.write(stdout)
}

// execute runs `bench demo` or `bench run` and writes the outputs.
func execute(ctx context.Context, o Options, argv []string, stdout, stderr io.Writer) (err error) {
	if o.Command == "render" {
		return render(o, stdout, stderr)
	}
	start := time.Now()
	o, skipped, err := dropAIOWithoutFio(o, fioInstalled())
	if err != nil {
		return err
	}
	b := &bench{
		opts: o, stderr: stderr,
		link: netem.Link{RTT: o.RTT, PerConn: o.ConnMBs * 1e6, Total: o.LinkMBs * 1e6},
	}
	b.spec = datasetSpec(o)
	if b.opts.DataDir == "" {
		b.opts.DataDir = filepath.Join(o.WorkDir, "data-"+specID(b.spec))
	}
	b.report = &Report{Command: argv, Started: start.UTC(), Machine: describeMachine(o.WorkDir), FerryTree: ferryTree(ctx), Options: b.opts, LoadStart: loadAvg()}
	if skipped != "" {
		b.logf("%s", skipped)
		b.report.Notes = append(b.report.Notes, skipped)
	}
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil {
		return err
	}
	if err := b.prepareData(ctx); err != nil {
		return fmt.Errorf("writing the local copy: %w", err)
	}
	if o.Command == "generate" {
		return nil
	}
	ws := buildWorkloads(b.opts, b.spec, b.link)

	if o.TargetDir == "" {
		b.report.FerryArgs = o.FerryArgs
		// huge alone reads a file:// source of its own: no store.
		if needStore := len(ws) > 0 || contains(o.Workloads, overCacheName); needStore {
			b.report.Link = linkJSON(b.link)
			stop, err := b.startStore(ctx, o)
			if err != nil {
				return err
			}
			defer stop()
		}
		bin := o.FerryBin
		if bin == "" {
			t := time.Now()
			b.logf("building ferry from this tree (go build)")
			if bin, err = buildFerry(ctx, o.WorkDir); err != nil {
				return err
			}
			b.logf("built %s in %v", bin, time.Since(t).Round(100*time.Millisecond))
		}
		b.ferry = &Ferry{Bin: bin, LogDir: o.WorkDir, Args: o.FerryArgs}
		if b.remote != nil {
			b.ferry.Source, b.ferry.Env = b.remote.Source, b.remote.Env
			b.ferry.Args = append(append([]string{}, b.remote.Args...), o.FerryArgs...)
			if err := b.upload(ctx); err != nil {
				return err
			}
		}
	}

	// The physical limit first: the same bytes on local disk.
	for _, w := range ws {
		if ctx.Err() != nil {
			break
		}
		b.measure(ctx, w, PhaseLocal, "local", b.opts.DataDir, nil)
	}

	// What the emulated link delivers on this machine without ferry.
	if b.remote != nil {
		for _, w := range ws {
			if w.Direct != nil && ctx.Err() == nil {
				b.measure(ctx, Workload{Name: w.Name, Expect: w.Expect, Limit: w.Limit, Run: w.Direct(b.remote.Reader)}, PhaseDirect, "store", "", nil)
			}
		}
	}

	switch {
	case o.TargetDir != "":
		for _, phase := range []string{PhaseCold, PhaseWarm} {
			for _, w := range ws {
				if ctx.Err() != nil {
					break
				}
				b.measure(ctx, w, phase, o.TargetDir, o.TargetDir, nil)
			}
		}
		b.report.Notes = append(b.report.Notes, fmt.Sprintf("Target %s: 'cold' is this run's first pass over it (page cache dropped; its own caches as they were), 'warm' the second.", o.TargetDir))
	default:
		var cached, uncached []Workload
		for _, w := range ws {
			if isAIO(w) {
				uncached = append(uncached, w)
			} else {
				cached = append(cached, w)
			}
		}
		switch {
		case len(cached) == 0:
		case o.Command == "demo":
			// Epochs: the whole dataset on one mount, as a training job reads it.
			err = b.runFerry(ctx, [][]Workload{cached})
		default:
			groups := make([][]Workload, len(cached))
			for i, w := range cached {
				groups[i] = []Workload{w}
			}
			err = b.runFerry(ctx, groups)
		}
		if err == nil && len(uncached) > 0 {
			err = b.runUncached(ctx, uncached)
		}
	}
	if err == nil && b.remote != nil && contains(o.Workloads, overCacheName) {
		err = b.runOverCache(ctx)
	}
	if err == nil && b.ferry != nil && contains(o.Workloads, hugeName) {
		err = b.runHuge(ctx)
	}
	if err == nil && b.ferry != nil && contains(o.Workloads, epochsName) {
		err = b.runEpochs(ctx)
	}
	if err == nil {
		err = ctx.Err()
	}

	b.report.derive(b.remote != nil)
	b.report.Duration = time.Since(start).Seconds()
	b.report.LoadEnd = loadAvg()
	if werr := b.write(stdout); werr != nil {
		err = errors.Join(err, werr)
	}
	return err
}

// startStore starts the emulated store behind the emulated link, in the
// place chooseStoreDir picks, and returns what stops it and removes its
// objects.
func (b *bench) startStore(ctx context.Context, o Options) (func(), error) {
	// Objects a run killed before its cleanup left behind: the layout
	// before 9601442 (under the work directory), and this work
	// directory's in /dev/shm, whose memory would otherwise stay taken
	// and send this run to disk.
	_ = os.RemoveAll(filepath.Join(o.WorkDir, "store-"+o.Store))
	if o.StoreDir == "" {
		_ = os.RemoveAll(filepath.Join(shmDir, storeDirName(o, shmDir)))
	} else {
		if abs, err := filepath.Abs(o.StoreDir); err == nil {
			o.StoreDir = abs
		}
		if err := os.MkdirAll(o.StoreDir, 0o755); err != nil {
			return nil, fmt.Errorf("--store-dir: %w", err)
		}
	}
	place := chooseStoreDir(o, b.spec.TotalBytes(), len(b.spec.Files()), realHost)
	storeDir := place.Dir
	_ = os.RemoveAll(storeDir)
	if place.Why != "" {
		b.logf("the emulator's objects go to disk: %s", place.Why)
	}
	tool := emulator.FakeGCS
	if o.Store == "s3" {
		tool = emulator.VersityGW
	}
	if _, err := emulator.BinaryTelling(ctx, tool, b.logf); err != nil {
		return nil, err
	}
	b.logf("starting the %s emulator behind the emulated link (%v RTT, %.0f MB/s per connection, %.0f MB/s in all), %s", o.Store, o.RTT, o.ConnMBs, o.LinkMBs, place.describe())
	var err error
	b.remote, err = StartRemote(ctx, o.Store, storeDir, b.link)
	if err != nil {
		return nil, err
	}
	b.report.Store = b.remote.Desc + ", " + place.describe()
	return func() {
		if cerr := b.remote.Close(); cerr != nil {
			b.logf("stopping the store: %v", cerr)
		}
		_ = os.RemoveAll(storeDir)
	}, nil
}

// ferryTree names the source ferry was built from: the commit, and
// "-dirty" with uncommitted changes (figures of a tree in flux say so).
func ferryTree(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// chartCap is the link cap in MiB/s when a link was emulated.
func (b *bench) chartCap() float64 {
	if b.report.Link == nil {
		return 0
	}
	return b.link.Total / mib
}

// write prints the table and writes --out.
func (b *bench) write(stdout io.Writer) error {
	fmt.Fprintln(stdout)
	demo := b.opts.Command == "demo"
	if !demo || b.opts.Full {
		if err := b.report.WriteMarkdown(stdout); err != nil {
			return err
		}
	}
	if demo {
		// The demo ends with what a newcomer reads first (demo.go).
		if b.opts.Full {
			fmt.Fprintln(stdout)
		}
		if _, err := io.WriteString(stdout, demoSummary(b.report)); err != nil {
			return err
		}
	}
	if b.opts.Out == "" {
		return nil
	}
	if err := os.MkdirAll(b.opts.Out, 0o755); err != nil {
		return err
	}
	var errs []error
	outputs := map[string]func(io.Writer) error{
		"results.md":   b.report.WriteMarkdown,
		"results.json": b.report.WriteJSON,
	}
	// Metadata-only runs (walk, ls-lr) have no throughput to chart.
	if workloads, _, _ := chartSeries(b.report.Rows); len(workloads) > 0 {
		outputs["chart.svg"] = func(w io.Writer) error {
			return writeChart(w, "ferry benchmark: throughput per workload and phase", b.report.Rows, b.chartCap(), "svg")
		}
		outputs["chart.png"] = func(w io.Writer) error {
			return writeChart(w, "ferry benchmark: throughput per workload and phase", b.report.Rows, b.chartCap(), "png")
		}
	} else {
		b.logf("no rows with bytes: no chart")
	}
	for name, write := range outputs {
		f, err := os.Create(filepath.Join(b.opts.Out, name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, write(f), f.Close())
	}
	b.logf("wrote %d files to %s", len(outputs), b.opts.Out)
	return errors.Join(errs...)
}
