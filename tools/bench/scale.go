package main

// `bench scale`: ferry on an ImageNet-shaped tree at growing file counts
// (find, ls -lR and a shuffled read by 8 readers; cold, warm, after a
// remount), beside the same tree read on local disk, and an `ls -l` of
// one flat directory of a million objects. It reports the curves over
// the count and checks issue 31's targets. See docs/bench/scale.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"ferry/bucket"
	"ferry/bucket/emulator"
	"ferry/tools/bench/netem"
	"ferry/tools/bench/workload"
)

// Passes of `bench scale`.
const (
	PassFind = "find"
	PassLsLR = "ls -lR"
	PassRead = "read"  // every file whole, shuffled, --readers at once
	PassLsL  = "ls -l" // the flat directory
)

// Sources of `bench scale`'s rows: what was read, and how.
const (
	SrcLocal = "local"  // the tree on local disk, no ferry
	SrcFile  = "file"   // ferry on file://
	SrcGCS   = "gcs"    // ferry on the GCS emulator behind the emulated link
	SrcFlat  = "flat"   // ferry on file:// of the flat directory
	SrcFlatL = "flat-l" // the flat directory on local disk
)

// scaleMain runs `bench scale ARGS` and returns the exit code.
func scaleMain(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	o, err := parseScaleArgs(argv[2:], stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench scale: %v\n", err)
		return 2
	}
	run := runScale
	if o.Render != "" {
		run = renderScale
	}
	if err := run(ctx, o, commandLine(argv), stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "bench scale: %v\n", err)
		return 1
	}
	return 0
}

// scale is one run of `bench scale`.
type scale struct {
	opts   ScaleOptions
	ferry  string // the binary
	stderr io.Writer
	mounts int
	report *ScaleReport
}

func (s *scale) logf(format string, args ...any) {
	fmt.Fprintf(s.stderr, "bench scale: "+format+"\n", args...)
}

// runScale generates the trees, measures each, and writes the report.
// Everything it starts is stopped before it returns.
func runScale(ctx context.Context, o ScaleOptions, argv []string, stdout, stderr io.Writer) (err error) {
	start := time.Now()
	memLimit, _ := o.memoryLimit() // validated
	s := &scale{opts: o, stderr: stderr}
	s.report = &ScaleReport{Command: argv, Started: start.UTC(), Options: o, MemoryLimit: memLimit, LoadStart: loadAvg()}
	for _, d := range []string{o.DataDir, o.WorkDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	s.report.Machine, s.report.FerryTree = describeMachine(o.WorkDir), ferryTree(ctx)
	trees, note, err := o.trees(s.freeForTrees())
	if err != nil {
		return err
	}
	if note != "" {
		s.logf("%s", note)
		s.report.Notes = append(s.report.Notes, note)
	}
	s.report.Trees = trees
	if s.ferry = o.FerryBin; s.ferry == "" {
		if s.ferry, err = buildFerry(ctx, o.WorkDir); err != nil {
			return err
		}
	}
	defer func() {
		_ = os.RemoveAll(filepath.Join(o.WorkDir, "caches"))
		_ = os.RemoveAll(filepath.Join(o.WorkDir, "gcs"))
		if !o.KeepData {
			_ = os.RemoveAll(o.DataDir)
		}
	}()
	for i, t := range trees {
		if err = s.runTree(ctx, t, i == 0 && o.GCS); err != nil {
			break
		}
	}
	if err == nil && o.Flat > 0 {
		err = s.runFlat(ctx, o.flatTree())
	}
	if err == nil {
		err = ctx.Err()
	}
	s.report.derive()
	s.report.Duration = time.Since(start).Seconds()
	s.report.LoadEnd = loadAvg()
	if werr := s.report.write(stdout, o.Out); werr != nil {
		err = errors.Join(err, werr)
	}
	if o.Out != "" {
		s.logf("wrote README.md, results.json and files-per-second.svg to %s", o.Out)
	}
	return err
}

// renderScale writes the report of o.Render again, its targets checked
// by this build.
func renderScale(_ context.Context, o ScaleOptions, _ []string, stdout, _ io.Writer) error {
	b, err := os.ReadFile(o.Render)
	if err != nil {
		return err
	}
	var rep ScaleReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", o.Render, err)
	}
	rep.derive()
	return rep.write(stdout, o.Out)
}

// freeForTrees is the free space under --data-dir, plus what the
// ImageNet-sized trees already there hold (a rerun reuses them).
func (s *scale) freeForTrees() int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.opts.DataDir, &st); err != nil {
		return 0
	}
	free := int64(st.Bavail) * st.Bsize
	for _, n := range s.opts.Files {
		t := Tree{Root: "train", Files: n, Dirs: s.opts.Dirs, Seed: s.opts.Seed}
		if b, err := dirUsage(filepath.Join(s.opts.DataDir, t.ID())); err == nil {
			free += b
		}
	}
	return free
}

// generate writes t under --data-dir (or finds it there) and returns
// its directory.
func (s *scale) generate(ctx context.Context, t Tree) (string, error) {
	dir := filepath.Join(s.opts.DataDir, t.ID())
	began := time.Now()
	wrote, err := t.Generate(ctx, dir, 8, func(n int) {
		if n%100_000 == 0 {
			s.logf("%s: %d of %d files written", t.ID(), n, t.Files)
		}
	})
	if err != nil {
		return "", fmt.Errorf("generating %s: %w", t.ID(), err)
	}
	if wrote {
		s.logf("%s: generated in %v", t.ID(), time.Since(began).Round(time.Second))
		s.report.GenerateSeconds += time.Since(began).Seconds()
	} else {
		s.logf("%s: reusing the tree in %s", t.ID(), dir)
	}
	return dir, nil
}

// runTree measures one count: local disk, ferry on file://, and (gcs)
// ferry on the GCS emulator.
func (s *scale) runTree(ctx context.Context, t Tree, gcs bool) error {
	dir, err := s.generate(ctx, t)
	if err != nil {
		return err
	}
	names := t.Names()
	for _, p := range s.passes(dir, names) {
		s.measure(ctx, ScaleRow{Files: t.Files, Source: SrcLocal, Phase: PhaseLocal, Pass: p.name}, nil, 0, p.run)
	}
	f := &Ferry{Bin: s.ferry, Source: "file://" + dir}
	if err := s.runFerry(ctx, t, SrcFile, f, 0, dir, names); err != nil {
		return err
	}
	if gcs && ctx.Err() == nil {
		s.runGCS(ctx, t, dir, names)
	}
	return ctx.Err()
}

type pass struct {
	name string
	run  func(context.Context) (workload.Result, error)
}

// passes are find, ls -lR and the shuffled read, rooted at root.
func (s *scale) passes(root string, names []string) []pass {
	return []pass{
		{PassFind, func(ctx context.Context) (workload.Result, error) { return workload.CountLines(ctx, "find", root) }},
		{PassLsLR, func(ctx context.Context) (workload.Result, error) {
			return workload.CountLines(ctx, "ls", "-lR", "--color=never", root)
		}},
		{PassRead, func(ctx context.Context) (workload.Result, error) {
			return workload.Shuffled(ctx, root, names, s.opts.Readers, s.opts.Seed, nil)
		}},
	}
}

// runFerry mounts f on a fresh cache and runs the passes cold and warm,
// then again on a new ferry over the same cache. local is the tree on
// disk, to check bytes read through ferry against.
func (s *scale) runFerry(ctx context.Context, t Tree, src string, f *Ferry, storePid int, local string, names []string) error {
	cache := filepath.Join(s.opts.WorkDir, "caches", src)
	_ = os.RemoveAll(cache)
	defer os.RemoveAll(cache)
	for _, phase := range []string{PhaseCold, PhaseRemount} {
		m, ms, err := s.mount(ctx, f, cache, t, src, phase, names[0])
		if err != nil {
			return err
		}
		phases := []string{phase}
		if phase == PhaseCold {
			phases = append(phases, PhaseWarm)
		}
		for _, ph := range phases {
			for _, p := range s.passes(m.Dir, names) {
				r := s.measure(ctx, ScaleRow{Files: t.Files, Source: src, Phase: ph, Pass: p.name}, m, storePid, p.run)
				if p.name == PassRead && r.Error == "" {
					s.verify(m.Dir, local, names, &s.report.Rows[len(s.report.Rows)-1])
				}
			}
		}
		var uerr error
		ms.CacheBytes, uerr = dirUsage(cache)
		if tree := int64(t.Files) * s.opts.TinySize; uerr == nil && s.opts.Sizes == SizesTiny && ms.CacheBytes < tree {
			// A cache that could not store the tree (its volume under
			// --cache-min-free) makes the warm and remount passes
			// store reads: say so, or the rows mislead.
			uerr = fmt.Errorf("the cache holds %d bytes, less than the tree's %d: the passes after the cold read did not read from it", ms.CacheBytes, tree)
		}
		if uerr != nil && ms.Error == "" {
			ms.Error = oneLine(uerr.Error())
		}
		s.report.Mounts = append(s.report.Mounts, ms)
		if err := m.Unmount(); err != nil {
			s.report.Notes = append(s.report.Notes, "unmount: "+oneLine(err.Error()))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// mount starts ferry on cache and times it: until the kernel lists the
// mount, then until the first file is read whole.
func (s *scale) mount(ctx context.Context, f *Ferry, cache string, t Tree, src, phase, first string) (*Mount, ScaleMount, error) {
	port, err := emulator.FreePort()
	if err != nil {
		return nil, ScaleMount{}, err
	}
	mf := *f
	mf.LogDir = s.opts.WorkDir
	mf.Args = append(append([]string{"--metadata-ttl", "-1", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port)}, f.Args...), s.opts.FerryArgs...)
	mnt := filepath.Join(s.opts.WorkDir, "mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, ScaleMount{}, err
	}
	s.mounts++
	dropPageCache()
	began := time.Now()
	m, err := mf.Mount(ctx, mnt, cache, s.mounts)
	if err != nil {
		return nil, ScaleMount{}, err
	}
	m.Metrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	ms := ScaleMount{Files: t.Files, Source: src, Phase: phase, MountSeconds: time.Since(began).Seconds()}
	t0 := time.Now()
	if _, err := os.ReadFile(filepath.Join(mnt, first)); err != nil {
		ms.Error = err.Error()
	}
	ms.FirstReadSeconds = time.Since(t0).Seconds()
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.Pid)); err == nil {
		ms.RSS, _ = parseStatusField(b, "VmRSS")
	}
	s.logf("%d files, %s, %s mount: mount returned in %.2f s, first read %.3f s later, RSS %.0f MiB",
		t.Files, src, phase, ms.MountSeconds, ms.FirstReadSeconds, float64(ms.RSS)/mib)
	return m, ms, nil
}

// verify compares a sample of files read through the mount with the
// tree on local disk.
func (s *scale) verify(mnt, local string, names []string, row *ScaleRow) {
	row.Verified = "ok"
	for k := range 32 {
		name := names[(k*7919)%len(names)]
		got, err := os.ReadFile(filepath.Join(mnt, name))
		if err != nil {
			row.Verified = "WRONG: " + err.Error()
			return
		}
		want, err := os.ReadFile(filepath.Join(local, name))
		if err != nil || string(got) != string(want) {
			row.Verified = fmt.Sprintf("WRONG: %s differs from the local copy", name)
			return
		}
	}
}

// runGCS uploads t to the GCS emulator and runs the ferry passes on it
// through the emulated link. A failure is a row's error and a note, not
// the end of the run: the emulator is a stand-in, and where it stops
// coping is itself a finding.
func (s *scale) runGCS(ctx context.Context, t Tree, local string, names []string) {
	fail := func(what string, err error) {
		note := fmt.Sprintf("GCS emulator at %d files: %s: %s", t.Files, what, oneLine(err.Error()))
		s.logf("%s", note)
		s.report.Notes = append(s.report.Notes, note)
	}
	dir := filepath.Join(s.opts.WorkDir, "gcs")
	_ = os.RemoveAll(dir)
	r, err := StartRemote(ctx, "gcs", dir, netem.Default)
	if err != nil {
		fail("start", err)
		return
	}
	defer func() {
		_ = r.Close()
		_ = os.RemoveAll(dir)
	}()
	began := time.Now()
	if err := uploadTree(ctx, r.Writer, local, names, 8); err != nil {
		fail("upload", err)
		return
	}
	s.logf("uploaded %d files to the GCS emulator in %v", t.Files, time.Since(began).Round(time.Second))
	s.report.Link = linkJSON(netem.Default)
	f := &Ferry{Bin: s.ferry, Source: r.Source, Args: r.Args, Env: r.Env}
	if err := s.runFerry(ctx, t, SrcGCS, f, r.StorePid(), local, names); err != nil {
		fail("ferry", err)
	}
}

// uploadTree puts every file of the tree under local to w, parallel
// uploads at once.
func uploadTree(ctx context.Context, w bucket.Writer, local string, names []string, parallel int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, name := range names {
		g.Go(func() error {
			b, err := os.ReadFile(filepath.Join(local, name))
			if err == nil {
				_, err = w.Put(ctx, &bucket.PutRequest{Name: name, Data: b})
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// runFlat lists the flat directory on local disk and through ferry,
// cold and warm.
func (s *scale) runFlat(ctx context.Context, t Tree) error {
	dir, err := s.generate(ctx, t)
	if err != nil {
		return err
	}
	ls := func(root string) func(context.Context) (workload.Result, error) {
		return func(ctx context.Context) (workload.Result, error) {
			return workload.CountLines(ctx, "ls", "-l", "--color=never", filepath.Join(root, t.Root))
		}
	}
	s.measure(ctx, ScaleRow{Files: t.Files, Source: SrcFlatL, Phase: PhaseLocal, Pass: PassLsL}, nil, 0, ls(dir))
	cache := filepath.Join(s.opts.WorkDir, "caches", SrcFlat)
	_ = os.RemoveAll(cache)
	defer os.RemoveAll(cache)
	m, ms, err := s.mount(ctx, &Ferry{Bin: s.ferry, Source: "file://" + dir}, cache, t, SrcFlat, PhaseCold, t.Name(0))
	if err != nil {
		return err
	}
	s.report.Mounts = append(s.report.Mounts, ms)
	for _, ph := range []string{PhaseCold, PhaseWarm} {
		s.measure(ctx, ScaleRow{Files: t.Files, Source: SrcFlat, Phase: ph, Pass: PassLsL}, m, 0, ls(m.Dir))
	}
	if err := m.Unmount(); err != nil {
		s.report.Notes = append(s.report.Notes, "unmount: "+oneLine(err.Error()))
	}
	return ctx.Err()
}

// measure runs one pass, the page cache dropped first, and records what
// it cost ferry (m; nil on local disk) and the store (storePid; 0 for
// none).
func (s *scale) measure(ctx context.Context, row ScaleRow, m *Mount, storePid int, run func(context.Context) (workload.Result, error)) ScaleRow {
	_ = exec.Command("sync").Run()
	dropPageCache()
	var cpu0, store0 time.Duration
	var peaks *metricPeaks
	if m != nil {
		_ = resetPeakRSS(m.Pid)
		cpu0, _ = procCPU(m.Pid)
		peaks = watchMetrics(m.Metrics, 250*time.Millisecond)
	}
	if storePid > 0 {
		store0, _ = procCPU(storePid)
	}
	r, err := run(ctx)
	row.Ops, row.Bytes, row.Seconds = r.Ops, r.Bytes, r.Elapsed.Seconds()
	if m != nil {
		if t, err := procCPU(m.Pid); err == nil {
			row.FerryCPU = (t - cpu0).Seconds()
		}
		row.PeakRSS, _ = procPeakRSS(m.Pid)
		p := peaks.stop()
		row.PeakHeap, row.MetadataBytes, row.Inodes, row.Evictions = p.heap, p.metadata, p.inodes, p.evictions
	}
	if storePid > 0 {
		if t, err := procCPU(storePid); err == nil {
			row.StoreCPU = (t - store0).Seconds()
		}
	}
	if err != nil {
		row.Error = err.Error()
	}
	s.logf("%s", row.line())
	s.report.Rows = append(s.report.Rows, row)
	return row
}
