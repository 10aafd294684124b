package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"ferry/tools/bench/dataset"
	"ferry/tools/bench/workload"
)

// The huge workload (issue 32): one object of --huge-size (200 GiB) on a
// file:// source, sparse, with real bytes only in a few regions of
// --huge-region (1 GiB) each, at its start, a third and two thirds in
// and its end; and a base object of one region's size with the same kind
// of bytes. Each region's bytes are the generator's stream for the name
// "OBJECT@OFFSET", so a region is written and checked without generating
// the 199 GiB before it, and the source takes only a few regions of disk.
//
// On a fresh mount with an empty --cache-dir (ferry's default flags
// otherwise), the base object is read whole and then each region of the
// huge one, sequentially in 1 MiB reads, page cache dropped before each;
// then, on another fresh mount and cache, --huge-records random 1 MiB
// reads of the base object and as many in each of the huge object's
// regions: the same reads per region, since how densely a region is read
// decides how much of the file:// source's own readahead (read_ahead_kb)
// a later read finds in the page cache, whatever the object's size.
// The goals compare each huge row with the base row of the same run: the
// rate, the CPU-s ferry spent per GiB, and peak RSS against
// --memory-limit. Not in the default set: it needs about four regions
// per region read of free disk (source and cache), and it does not use
// the emulated store.
const hugeName = "huge"

// The objects of the huge workload's source directory.
const (
	hugeObject = "huge.bin"
	hugeBase   = "base.bin"
	hugeRead   = 1 << 20 // the read size, sequential and random
)

// hugeRegion is a written range of an object: its bytes are the
// generator's stream for Name (see regionName).
type hugeRegion struct {
	Object string
	Offset int64
	Size   int64
}

// regionName names a region's byte stream in the generator.
func (r hugeRegion) regionName() string { return fmt.Sprintf("%s@%d", r.Object, r.Offset) }

// label is how rows name the region: "huge@64g".
func (r hugeRegion) label() string {
	return fmt.Sprintf("%s@%s", hugeName, gibLabel(r.Offset))
}

// gibLabel is sizeLabel with gibibytes: "199g", "1m", "0".
func gibLabel(n int64) string {
	if n == 0 {
		return "0"
	}
	if n%(1<<30) == 0 {
		return fmt.Sprintf("%dg", n>>30)
	}
	return sizeLabel(n)
}

// hugeRegions are the written regions of an object of size bytes: at 0,
// a third and two thirds in (rounded down to a region) and the last
// region. size must hold four regions.
func hugeRegions(size, region int64) ([]hugeRegion, error) {
	if region <= 0 || region%hugeRead != 0 {
		return nil, fmt.Errorf("--huge-region %d: want a positive multiple of 1 MiB", region)
	}
	if size < 4*region {
		return nil, fmt.Errorf("--huge-size %d: want at least four regions (--huge-region %d)", size, region)
	}
	offs := []int64{0, size / 3 / region * region, 2 * size / 3 / region * region, size - region}
	out := make([]hugeRegion, 0, len(offs))
	for i, off := range offs {
		if i > 0 && off < offs[i-1]+region {
			return nil, fmt.Errorf("--huge-size %d: regions of %d at %v overlap", size, region, offs)
		}
		out = append(out, hugeRegion{Object: hugeObject, Offset: off, Size: region})
	}
	return out, nil
}

// hugeRecords are n reads of hugeRead bytes at seeded offsets aligned to
// hugeRead inside regions, spread over them in turn; File indexes
// objects in the order they first appear in regions. No offset is read
// twice until its region has been read whole: a second read of an offset
// comes from a cache, and offsets drawn at random with repeats would
// repeat more in the base object's one region than in the huge object's
// four (512 reads: 108 repeats against 32), which made the base row the
// faster for a reason that is not the object's size.
func hugeRecords(regions []hugeRegion, n int, seed uint64) []workload.Record {
	rng := rand.New(rand.NewPCG(seed, 0x4096e))
	files := map[string]int{}
	for _, r := range regions {
		if _, ok := files[r.Object]; !ok {
			files[r.Object] = len(files)
		}
	}
	slots := make([][]int, len(regions)) // each region's slots, shuffled; drawn from the end
	out := make([]workload.Record, n)
	for i := range out {
		j := i % len(regions)
		r := regions[j]
		if len(slots[j]) == 0 {
			slots[j] = rng.Perm(int(r.Size / hugeRead))
		}
		k := slots[j][len(slots[j])-1]
		slots[j] = slots[j][:len(slots[j])-1]
		out[i] = workload.Record{File: files[r.Object], Offset: r.Offset + int64(k)*hugeRead, Size: hugeRead}
	}
	return out
}

// regionOf is the region holding [off, off+size), if one does.
func regionOf(regions []hugeRegion, object string, off, size int64) (hugeRegion, bool) {
	for _, r := range regions {
		if r.Object == object && off >= r.Offset && off+size <= r.Offset+r.Size {
			return r, true
		}
	}
	return hugeRegion{}, false
}

// writeHugeSource writes the source directory: the huge object sparse at
// size with its regions written, and the base object whole. It checks
// first that the disk has room for them and for ferry's cache of them.
func writeHugeSource(spec dataset.Spec, dir string, size int64, regions []hugeRegion, base hugeRegion) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	need := 2*int64(len(regions)+1)*base.Size + 1<<30
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return err
	}
	if free := int64(st.Bavail) * st.Bsize; free < need {
		return fmt.Errorf("%s: %d MiB free, the huge workload needs %d MiB (source and cache of its regions)", dir, free>>20, need>>20)
	}
	write := func(name string, size int64, regions []hugeRegion) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Truncate(size); err != nil {
			return err
		}
		for _, r := range regions {
			w := io.NewOffsetWriter(f, r.Offset)
			if _, err := io.Copy(w, spec.Reader(r.regionName(), r.Size)); err != nil {
				return fmt.Errorf("%s at %d: %w", name, r.Offset, err)
			}
		}
		return f.Close()
	}
	if err := write(hugeObject, size, regions); err != nil {
		return err
	}
	return write(hugeBase, base.Size, []hugeRegion{base})
}

// readRegion reads n bytes of path from off sequentially, hugeRead at a
// time (what `dd bs=1M skip=...` does).
func readRegion(ctx context.Context, path string, off, n int64, p workload.Progress) (workload.Result, error) {
	start := time.Now()
	f, err := os.Open(path)
	if err != nil {
		return workload.Result{}, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return workload.Result{}, err
	}
	buf := make([]byte, hugeRead)
	var res workload.Result
	for res.Bytes < n {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		m, err := f.Read(buf[:min(int64(len(buf)), n-res.Bytes)])
		res.Bytes += int64(m)
		res.Ops++
		if p != nil && m > 0 {
			p(int64(m))
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%s: end of file at %d, want %d bytes from %d", path, off+res.Bytes, n, off)
			}
			res.Elapsed = time.Since(start)
			return res, err
		}
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// checkHuge compares count reads of hugeRead at seeded offsets of region
// (read through root) with the generator.
func checkHuge(spec dataset.Spec, root string, region hugeRegion, count int, seed uint64) error {
	for _, rec := range hugeRecords([]hugeRegion{region}, count, seed) {
		if err := checkHugeAt(spec, root, region, rec.Offset, rec.Size); err != nil {
			return err
		}
	}
	return nil
}

// checkHugeAt reads size bytes at off of region's object through root
// and compares them with the region's stream.
func checkHugeAt(spec dataset.Spec, root string, region hugeRegion, off, size int64) error {
	f, err := os.Open(filepath.Join(root, region.Object))
	if err != nil {
		return err
	}
	defer f.Close()
	got := make([]byte, size)
	if n, err := f.ReadAt(got, off); int64(n) != size {
		return fmt.Errorf("%s: read %d bytes at %d, want %d: %v", region.Object, n, off, size, err)
	}
	if err := spec.Verify(region.regionName(), off-region.Offset, got); err != nil {
		return fmt.Errorf("%s at %d: %w", region.Object, off, err)
	}
	return nil
}

// hugeWorkloads are the workload's rows: the sequential ones (base first,
// then each region of the huge object) and the random ones (base, then
// the huge object's regions).
func hugeWorkloads(o Options, spec dataset.Spec, regions []hugeRegion, base hugeRegion) (seq, random []Workload) {
	for _, r := range append([]hugeRegion{base}, regions...) {
		name := r.label()
		if r.Object == hugeBase {
			name = hugeName + "-base"
		}
		seq = append(seq, Workload{
			Name: name, Expect: r.Size,
			Run: func(ctx context.Context, root string, p workload.Progress) (Row, error) {
				res, err := readRegion(ctx, filepath.Join(root, r.Object), r.Offset, r.Size, p)
				return fromResult(res), err
			},
			Check: func(root string) error { return checkHuge(spec, root, r, 4, o.Seed+5) },
		})
	}
	for _, rs := range [][]hugeRegion{{base}, regions} {
		name := hugeName + "-base-random"
		if rs[0].Object == hugeObject {
			name = hugeName + "-random"
		}
		recs := hugeRecords(rs, o.HugeRecords*len(rs), o.Seed+6)
		files := []string{rs[0].Object}
		random = append(random, Workload{
			Name: name, Expect: int64(len(recs)) * hugeRead,
			Run: func(ctx context.Context, root string, p workload.Progress) (Row, error) {
				res, err := workload.Records(ctx, root, files, recs, o.RandomReaders, p)
				return fromResult(res), err
			},
			Check: func(root string) error {
				for _, rec := range recs[:min(4, len(recs))] {
					r, ok := regionOf(rs, files[rec.File], rec.Offset, rec.Size)
					if !ok {
						return fmt.Errorf("record at %d is in no region", rec.Offset)
					}
					if err := checkHugeAt(spec, root, r, rec.Offset, rec.Size); err != nil {
						return err
					}
				}
				return nil
			},
		})
	}
	return seq, random
}

// runHuge writes the huge workload's source under the work directory,
// measures its rows on two fresh mounts, each with a cache of its own,
// and removes the source and caches again.
func (b *bench) runHuge(ctx context.Context) error {
	o := b.opts
	regions, err := hugeRegions(o.HugeSize, o.HugeRegion)
	if err != nil {
		return err
	}
	base := hugeRegion{Object: hugeBase, Size: o.HugeRegion}
	spec := dataset.Spec{Seed: o.Seed}
	src := filepath.Join(o.WorkDir, "huge-src")
	if err := os.RemoveAll(src); err != nil {
		return err
	}
	defer os.RemoveAll(src)
	t := time.Now()
	b.logf("%s: writing a %d GiB sparse object with %d regions of %d MiB, and a %d MiB one, in %s",
		hugeName, o.HugeSize>>30, len(regions), o.HugeRegion>>20, o.HugeRegion>>20, src)
	if err := writeHugeSource(spec, src, o.HugeSize, regions, base); err != nil {
		return fmt.Errorf("%s: %w", hugeName, err)
	}
	b.logf("%s: source written in %v", hugeName, time.Since(t).Round(100*time.Millisecond))
	var at []string
	for _, r := range regions {
		at = append(at, gibLabel(r.Offset))
	}
	b.report.Notes = append(b.report.Notes, fmt.Sprintf("%s: a %s object on file://, sparse but for %s at %s, against a base object of %s; "+
		"each read cold (page cache dropped) on a fresh mount with an empty --cache-dir, sequential rows on one mount, random rows (%d reads of %s per region, %d readers) on another",
		hugeName, gibLabel(o.HugeSize), gibLabel(o.HugeRegion), strings.Join(at, ", "), gibLabel(o.HugeRegion), o.HugeRecords, sizeLabel(hugeRead), o.RandomReaders))
	seq, random := hugeWorkloads(o, spec, regions, base)
	f := &Ferry{Bin: b.ferry.Bin, Source: "file://" + src, Args: o.FerryArgs, LogDir: o.WorkDir}
	for i, ws := range [][]Workload{seq, random} {
		if err := b.hugeMount(ctx, f, fmt.Sprintf("cache-huge-%d", i), ws); err != nil {
			return err
		}
	}
	return nil
}

// hugeMount measures ws cold, in turn, on a fresh ferry mount of f with an
// empty cache named cache under the work directory, removed afterwards.
func (b *bench) hugeMount(ctx context.Context, f *Ferry, cache string, ws []Workload) error {
	cacheDir := filepath.Join(b.opts.WorkDir, cache)
	if err := os.RemoveAll(cacheDir); err != nil {
		return err
	}
	defer os.RemoveAll(cacheDir)
	dir := filepath.Join(b.opts.WorkDir, "mnt-huge")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b.mounts++
	m, err := f.Mount(ctx, dir, cacheDir, b.mounts)
	if err != nil {
		return err
	}
	defer b.unmount(m)
	return b.measureCold(ctx, ws, m)
}

// cpuPerGiB is ferry's CPU-s per GiB read in r.
func cpuPerGiB(r Row) float64 { return ratio(r.FerryCPU, float64(r.Bytes)/(1<<30)) }

// hugeTargets are issue 32's goals for the huge object, each against the
// base object's row of the same run: every region's cold sequential rate
// at least 90% of the base's, its CPU per GiB at most 1.1x the base's,
// the peak RSS of every huge-object row at most --memory-limit + 96 MiB
// (memoryLimit 0: unknown, skipped), and random reads at least 90% of
// the base's rate (the issue asks for "as in a 1 GiB one"; 90% is this
// bench's reading of it). Rows that did not run are skipped. The goals
// set no AtLeast: they have no store-direct figure to be judged by.
func hugeTargets(rows []Row, memoryLimit int64) []Target {
	var out []Target
	var peak Row
	base, okBase := findRow(rows, hugeName+"-base", PhaseCold)
	for _, r := range rows {
		if r.Target != "ferry" || r.Error != "" || !strings.HasPrefix(r.Workload, hugeName+"@") && r.Workload != hugeName+"-random" {
			continue
		}
		if r.FerryPeakRSS > peak.FerryPeakRSS {
			peak = r
		}
		if !okBase || r.Workload == hugeName+"-random" {
			continue
		}
		v := ratio(r.Rate(), base.Rate())
		out = append(out, Target{What: fmt.Sprintf("%s: cold sequential read of %d MiB, rate of the base object's", r.Workload, r.Bytes>>20),
			Value: v, Want: ">= 90%", Met: v >= 0.9,
			Shown: fmt.Sprintf("%.0f%% (%.0f / %.0f MiB/s)", 100*v, r.Rate()/mib, base.Rate()/mib)})
		c := ratio(cpuPerGiB(r), cpuPerGiB(base))
		out = append(out, Target{What: fmt.Sprintf("%s: ferry CPU-s per GiB over the base object's", r.Workload),
			Value: c, Want: "<= 1.10x", Met: c > 0 && c <= 1.1,
			Shown: fmt.Sprintf("%.2fx (%.2f / %.2f CPU-s/GiB)", c, cpuPerGiB(r), cpuPerGiB(base))})
	}
	one, ok1 := findRow(rows, hugeName+"-base-random", PhaseCold)
	many, ok2 := findRow(rows, hugeName+"-random", PhaseCold)
	if ok1 && ok2 {
		v := ratio(many.Rate(), one.Rate())
		out = append(out, Target{What: fmt.Sprintf("%s: cold random %s reads, rate of the base object's", hugeName, sizeLabel(hugeRead)),
			Value: v, Want: ">= 90%", Met: v >= 0.9,
			Shown: fmt.Sprintf("%.0f%% (%.0f / %.0f MiB/s)", 100*v, many.Rate()/mib, one.Rate()/mib)})
	}
	if peak.Workload != "" && memoryLimit > 0 {
		out = append(out, Target{What: fmt.Sprintf("%s: peak RSS of the huge object's rows (at %s)", hugeName, peak.Workload),
			Value: float64(peak.FerryPeakRSS), Want: fmt.Sprintf("<= %d MiB (--memory-limit + 96 MiB)", (memoryLimit+96*mib)/mib),
			Met: peak.FerryPeakRSS <= memoryLimit+96*mib, Shown: fmt.Sprintf("%d MiB", peak.FerryPeakRSS/mib)})
	}
	return out
}
