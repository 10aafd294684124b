package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"ferry/bucket"
	"ferry/tools/bench/dataset"
	"ferry/tools/bench/mlperf"
	"ferry/tools/bench/netem"
	"ferry/tools/bench/workload"
)

// seqBuf is the read size of the sequential readers (what `dd bs=1M` or a
// data loader's buffered reader issues).
const seqBuf = 1 << 20

// mlperfWorkloads returns the three MLPerf workloads with sample sizes
// scaled (compute times are the rules' H100 times, unchanged).
func mlperfWorkloads(scale float64) map[string]mlperf.Workload {
	out := map[string]mlperf.Workload{}
	for name, w := range mlperf.Workloads {
		w.SampleSize = max(4096, int64(math.Round(float64(w.SampleSize)*scale/4096))*4096)
		out[name] = w
	}
	return out
}

// datasetSpec is the dataset the selected workloads need.
func datasetSpec(o Options) dataset.Spec {
	need := map[string]bool{}
	for _, w := range o.Workloads {
		need[w] = true
	}
	s := dataset.Spec{Seed: o.Seed}
	if need["seq-1"] || need["seq-n"] {
		s.Groups = append(s.Groups, dataset.Group{Dir: "large", Count: o.LargeFiles, Size: o.LargeSize})
	}
	if need["random"] {
		s.Groups = append(s.Groups, dataset.Group{Dir: "shards", Count: o.Shards, Size: o.ShardSize})
	}
	if need["small"] || need["walk"] || need["ls-lr"] {
		s.Groups = append(s.Groups, dataset.Group{Dir: "small", Count: o.SmallFiles, Size: o.SmallSize})
	}
	if need["aio"] {
		s.Groups = append(s.Groups, dataset.Group{Dir: aioDir, Count: 1, Size: aioSize})
	}
	if need[overCacheName] {
		s.Groups = append(s.Groups, overCacheGroup(o))
	}
	ml := mlperfWorkloads(o.MLPerfScale)
	for _, name := range []string{"unet3d", "resnet50", "cosmoflow"} {
		count := map[string]int{"unet3d": o.UNet3DFiles, "resnet50": o.ResNet50Files, "cosmoflow": o.CosmoFiles}[name]
		if need[name] && count > 0 {
			w := ml[name]
			s.Groups = append(s.Groups, dataset.Group{Dir: name, Count: count, Size: w.SampleSize * int64(max(w.SamplesPerFile, 1))})
		}
	}
	return s
}

// specID names a dataset so that a local copy is reused only for the
// same spec.
func specID(s dataset.Spec) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%+v", s))
	return fmt.Sprintf("%x", h[:4])
}

// Workload is one timed read pattern.
type Workload struct {
	Name string
	// Expect is the bytes it reads (for the progress bar; 0 unknown).
	Expect int64
	// Limit is what the emulated link allows it, bytes/s (0: not a
	// bandwidth-bound workload).
	Limit float64
	// Run reads under root and fills Bytes, Ops, Seconds (and AU fields).
	Run func(ctx context.Context, root string, progress workload.Progress) (Row, error)
	// Check compares a sample of what Run reads with the generator.
	Check func(root string) error
	// Direct, for sequential workloads, reads the same objects straight
	// from the store through the emulated link (no file system).
	Direct func(b bucket.Bucket) func(ctx context.Context, root string, progress workload.Progress) (Row, error)
}

func fromResult(r workload.Result) Row {
	return Row{Bytes: r.Bytes, Ops: r.Ops, Seconds: r.Elapsed.Seconds()}
}

// buildWorkloads returns the selected workloads over spec.
func buildWorkloads(o Options, spec dataset.Spec, link netem.Link) []Workload {
	lim := Limits{Link: link}
	names := func(dir string) (out []string, sizes []int64) {
		for _, f := range spec.Group(dir) {
			out = append(out, f.Name)
			sizes = append(sizes, f.Size)
		}
		return out, sizes
	}
	var ws []Workload
	for _, name := range o.Workloads {
		switch name {
		case "seq-1", "seq-n":
			files, sizes := names("large")
			streams := o.Streams
			label := fmt.Sprintf("seq-%d", streams)
			if name == "seq-1" {
				files, sizes, streams, label = files[:o.Seq1Files], sizes[:o.Seq1Files], 1, "seq-1"
			}
			ws = append(ws, Workload{
				Name: label, Expect: sum(sizes), Limit: lim.Sequential(),
				Run: func(ctx context.Context, root string, p workload.Progress) (Row, error) {
					r, err := workload.Sequential(ctx, root, files, streams, seqBuf, p)
					return fromResult(r), err
				},
				Check: func(root string) error { return checkRanges(spec, root, files, sizes, 4, 1<<20, o.Seed) },
			})
			ws[len(ws)-1].Direct = func(bk bucket.Bucket) func(context.Context, string, workload.Progress) (Row, error) {
				return func(ctx context.Context, _ string, p workload.Progress) (Row, error) {
					if streams == 1 {
						return readDirectInTurn(ctx, bk, files, sizes, directParallel, directPart, p)
					}
					return readDirect(ctx, bk, files, sizes, directParallel, directPart, p)
				}
			}
		case "random":
			files, sizes := names("shards")
			recs := workload.RecordLayout(sizes, o.RecordSize, o.Records, o.Seed)
			ws = append(ws, Workload{
				Name:   fmt.Sprintf("random-%s", sizeLabel(o.RecordSize)),
				Expect: int64(len(recs)) * o.RecordSize, Limit: lim.Random(o.RandomReaders, o.RecordSize),
				Run: func(ctx context.Context, root string, p workload.Progress) (Row, error) {
					r, err := workload.Records(ctx, root, files, recs, o.RandomReaders, p)
					return fromResult(r), err
				},
				Check: func(root string) error { return checkRecords(spec, root, files, recs, 8, o.Seed+1) },
				Direct: func(bk bucket.Bucket) func(context.Context, string, workload.Progress) (Row, error) {
					return func(ctx context.Context, _ string, p workload.Progress) (Row, error) {
						jobs := make([]rangeJob, len(recs))
						for i, r := range recs {
							jobs[i] = rangeJob{files[r.File], bucket.ByteRange{Start: uint64(r.Offset), Limit: uint64(r.Offset + r.Size)}}
						}
						return readRanges(ctx, bk, jobs, o.RandomReaders, p)
					}
				},
			})
		case "small":
			files, sizes := names("small")
			ws = append(ws, Workload{
				Name:   fmt.Sprintf("small-%s", sizeLabel(o.SmallSize)),
				Expect: sum(sizes), Limit: lim.SmallFiles(o.SmallReaders, o.SmallSize),
				Run: func(ctx context.Context, root string, p workload.Progress) (Row, error) {
					r, err := workload.SmallFiles(ctx, root, "small", o.SmallReaders, p)
					return fromResult(r), err
				},
				Check: func(root string) error { return checkRanges(spec, root, files, sizes, 8, o.SmallSize, o.Seed+2) },
				Direct: func(bk bucket.Bucket) func(context.Context, string, workload.Progress) (Row, error) {
					return func(ctx context.Context, _ string, p workload.Progress) (Row, error) {
						jobs := make([]rangeJob, len(files))
						for i, f := range files {
							jobs[i] = rangeJob{f, bucket.ByteRange{Start: 0, Limit: uint64(sizes[i])}}
						}
						return readRanges(ctx, bk, jobs, o.SmallReaders, p)
					}
				},
			})
		case "walk":
			ws = append(ws, Workload{
				Name: "walk",
				Run: func(ctx context.Context, root string, _ workload.Progress) (Row, error) {
					r, err := workload.Walk(ctx, root, ".")
					return fromResult(r), err
				},
			})
		case "ls-lr":
			ws = append(ws, Workload{
				Name: "ls-lr",
				Run: func(ctx context.Context, root string, _ workload.Progress) (Row, error) {
					r, err := workload.ListLong(ctx, root, "small")
					return fromResult(r), err
				},
			})
		case "unet3d", "resnet50", "cosmoflow":
			w := mlperfWorkloads(o.MLPerfScale)[name]
			files, sizes := names(name)
			if len(files) == 0 {
				continue
			}
			ws = append(ws, Workload{
				Name: name, Expect: sum(sizes), Limit: lim.Sequential(),
				Run: func(ctx context.Context, root string, p workload.Progress) (Row, error) {
					return runMLPerf(ctx, o, w, root, files, p)
				},
				Check: func(root string) error { return checkRanges(spec, root, files, sizes, 4, 1<<20, o.Seed+3) },
			})
		case "aio":
			ws = append(ws, aioWorkloads(o, spec, lim)...)
		}
	}
	return ws
}

// The store-direct reader: enough parallel 8 MiB ranged GETs that
// neither the per-connection cap nor the round trip binds (16 x 50 MB/s
// is well above a 500 MB/s link).
const (
	directParallel = 16
	directPart     = 8 << 20
)

// readDirect reads files whole from the store, parallel ranged GETs of
// part bytes each, and discards the bytes.
func readDirect(ctx context.Context, bk bucket.Bucket, files []string, sizes []int64, parallel int, part int64, p workload.Progress) (Row, error) {
	var jobs []rangeJob
	for i, f := range files {
		for off := int64(0); off < sizes[i]; off += part {
			jobs = append(jobs, rangeJob{f, bucket.ByteRange{Start: uint64(off), Limit: uint64(min(off+part, sizes[i]))}})
		}
	}
	return readRanges(ctx, bk, jobs, parallel, p)
}

// readDirectInTurn is readDirect for one reader: each file is read whole
// before the next is started, as one sequential stream reads them, so
// every file pays for its first round trip and its tail.
func readDirectInTurn(ctx context.Context, bk bucket.Bucket, files []string, sizes []int64, parallel int, part int64, p workload.Progress) (Row, error) {
	var sum Row
	for i := range files {
		r, err := readDirect(ctx, bk, files[i:i+1], sizes[i:i+1], parallel, part, p)
		sum.Bytes += r.Bytes
		sum.Ops += r.Ops
		sum.Seconds += r.Seconds
		if err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// rangeJob is one ranged GET of the store-direct readers.
type rangeJob struct {
	name string
	r    bucket.ByteRange
}

// readRanges makes one ranged GET per job, parallel at a time, in order,
// and discards the bytes: what the emulated store and link deliver on
// this machine to a client that is not a file system.
func readRanges(ctx context.Context, bk bucket.Bucket, jobs []rangeJob, parallel int, p workload.Progress) (Row, error) {
	start := time.Now()
	var total atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, j := range jobs {
		g.Go(func() error {
			rc, err := bk.NewRangeReader(ctx, &bucket.ReadRequest{Name: j.name, Range: j.r})
			if err != nil {
				return err
			}
			defer rc.Close()
			buf := make([]byte, 256<<10)
			for {
				n, err := rc.Read(buf)
				total.Add(int64(n))
				if p != nil && n > 0 {
					p(int64(n))
				}
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return fmt.Errorf("%s %v: %w", j.name, j.r, err)
				}
			}
		})
	}
	err := g.Wait()
	return Row{Bytes: total.Load(), Ops: int64(len(jobs)), Seconds: time.Since(start).Seconds()}, err
}

// runMLPerf trains one pass over files.
func runMLPerf(ctx context.Context, o Options, w mlperf.Workload, root string, files []string, p workload.Progress) (Row, error) {
	pool := sync.Pool{New: func() any { b := make([]byte, 4<<20); return &b }}
	start := time.Now()
	res, err := mlperf.Run(ctx, mlperf.Config{
		Workload:              w,
		Accelerators:          o.Accelerators,
		ReadersPerAccelerator: o.MLPerfReaders,
		Files:                 files,
		Seed:                  o.Seed,
		Read: func(ctx context.Context, s mlperf.Sample) (int64, error) {
			bp := pool.Get().(*[]byte)
			defer pool.Put(bp)
			n, err := workload.ReadSample(root, s.File, s.Offset, s.Size, *bp)
			if p != nil {
				p(n)
			}
			return n, err
		},
	})
	if err != nil {
		return Row{Seconds: time.Since(start).Seconds()}, err
	}
	// The rate is the measured steps' (first step excluded, as the AU).
	secs := 0.0
	if res.BytesPerSecond > 0 {
		secs = float64(res.Bytes) / res.BytesPerSecond
	}
	pass := res.Pass
	return Row{Bytes: res.Bytes, Ops: int64(res.Steps), Seconds: secs, AU: res.AU, PassAU: w.PassAU, Pass: &pass, Accelerators: res.Accelerators}, nil
}

// checkRanges reads n ranges of up to size bytes, at seeded offsets of
// seeded files, and compares them with the generator.
func checkRanges(spec dataset.Spec, root string, files []string, sizes []int64, n int, size int64, seed uint64) error {
	if len(files) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, 0xfe77))
	for range n {
		i := rng.IntN(len(files))
		l := min(size, sizes[i])
		if err := checkRange(spec, root, files[i], rng.Int64N(sizes[i]-l+1), l); err != nil {
			return err
		}
	}
	return nil
}

// checkRecords compares n seeded records of recs with the generator.
func checkRecords(spec dataset.Spec, root string, files []string, recs []workload.Record, n int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0xfe77))
	for range min(n, len(recs)) {
		r := recs[rng.IntN(len(recs))]
		if err := checkRange(spec, root, files[r.File], r.Offset, r.Size); err != nil {
			return err
		}
	}
	return nil
}

// checkRange reads size bytes at off of name under root and compares them
// with the generator.
func checkRange(spec dataset.Spec, root, name string, off, size int64) error {
	f, err := os.Open(filepath.Join(root, name))
	if err != nil {
		return err
	}
	defer f.Close()
	got := make([]byte, size)
	if m, err := f.ReadAt(got, off); int64(m) != size {
		return fmt.Errorf("%s: read %d bytes at %d, want %d: %v", name, m, off, size, err)
	}
	return spec.Verify(name, off, got)
}

func sum(v []int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s
}

// sizeLabel is "512k", "128k", "1m" for workload names.
func sizeLabel(n int64) string {
	switch {
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dm", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%dk", n>>10)
	}
	return fmt.Sprintf("%d", n)
}
