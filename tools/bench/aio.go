package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"ferry/bucket"
	"ferry/tools/bench/dataset"
	"ferry/tools/bench/workload"
)

// The aio workload: fio reads 128 KiB blocks at random from one object,
// 16 at a time, in three shapes: one thread with 16 in flight through
// libaio, the same through io_uring, and 16 threads of one synchronous
// read each. All three with O_DIRECT, so that each read is a read of the
// store (no page cache to hit) and the only difference between them is
// who holds the 16 reads: the kernel's asynchronous direct I/O, or 16
// threads. Issue 32 measured one thread at one round trip per read
// (31 IOPS against 498 for 16 threads); its target is the libaio shape
// at 80% of the 16 threads' IOPS or more, in the same run. Through ferry
// these run on a mount without a disk cache (runUncached): every read is
// a round trip, as in the issue. Needs fio; without it the workload is
// skipped with a note.
const (
	aioDir   = "aio"
	aioSize  = 256 << 20
	aioBlock = 128 << 10
	aioDepth = 16
)

// aioShape is one way fio reads: jobs threads (processes), each with
// depth reads in flight through engine.
type aioShape struct {
	name        string
	engine      string
	depth, jobs int
}

var aioShapes = []aioShape{
	{name: "aio-libaio", engine: "libaio", depth: aioDepth, jobs: 1},
	{name: "aio-uring", engine: "io_uring", depth: aioDepth, jobs: 1},
	{name: fmt.Sprintf("aio-psync-%d", aioDepth), engine: "psync", depth: 1, jobs: aioDepth},
}

// isAIO reports whether a workload is one of the aio shapes.
func isAIO(w Workload) bool {
	for _, s := range aioShapes {
		if s.name == w.Name {
			return true
		}
	}
	return false
}

// fioInstalled is where fio is, "" without it.
func fioInstalled() string {
	p, err := exec.LookPath("fio")
	if err != nil {
		return ""
	}
	return p
}

// aioWorkloads returns the three shapes over the aio group's file.
func aioWorkloads(o Options, spec dataset.Spec, lim Limits) []Workload {
	files := spec.Group(aioDir)
	if len(files) == 0 {
		return nil
	}
	f := files[0]
	var ws []Workload
	for _, s := range aioShapes {
		ws = append(ws, Workload{
			Name: s.name, Expect: f.Size,
			// aioDepth synchronous readers of one block each.
			Limit: lim.Random(aioDepth, aioBlock),
			Run: func(ctx context.Context, root string, _ workload.Progress) (Row, error) {
				return runFio(ctx, filepath.Join(root, f.Name), f.Size, s)
			},
			Check: func(root string) error {
				return checkRanges(spec, root, []string{f.Name}, []int64{f.Size}, 8, aioBlock, o.Seed+4)
			},
		})
	}
	// The store's own client, aioDepth blocks in flight: the same for
	// every shape, so measured once, on the threads' row.
	last := &ws[len(ws)-1]
	last.Direct = func(bk bucket.Bucket) func(context.Context, string, workload.Progress) (Row, error) {
		return func(ctx context.Context, _ string, p workload.Progress) (Row, error) {
			return readRanges(ctx, bk, aioJobs(f, o.Seed), aioDepth, p)
		}
	}
	return ws
}

// aioJobs is every block of f once, in a seeded order: what fio's random
// map reads in one pass.
func aioJobs(f dataset.File, seed uint64) []rangeJob {
	n := int(f.Size / aioBlock)
	jobs := make([]rangeJob, n)
	for i, b := range rand.New(rand.NewPCG(seed, 0xa10)).Perm(n) {
		off := uint64(b) * aioBlock
		jobs[i] = rangeJob{f.Name, bucket.ByteRange{Start: off, Limit: off + aioBlock}}
	}
	return jobs
}

// aioRuntime bounds one fio run: a shape that reads one block per round
// trip (31 IOPS) would take over a minute for the whole file.
const aioRuntime = 30 * time.Second

// runFio reads path (size bytes) once over, in random blocks, as shape s:
// each job reads its share of the file, the jobs together the whole of
// it, or as much as aioRuntime allows.
func runFio(ctx context.Context, path string, size int64, s aioShape) (Row, error) {
	args := []string{
		"--name=" + s.name, "--filename=" + path, "--readonly", "--rw=randread",
		fmt.Sprintf("--bs=%d", aioBlock), "--direct=1", fmt.Sprintf("--size=%d", size),
		"--ioengine=" + s.engine, fmt.Sprintf("--iodepth=%d", s.depth), fmt.Sprintf("--numjobs=%d", s.jobs),
		fmt.Sprintf("--io_size=%d", size/int64(s.jobs)/aioBlock*aioBlock),
		fmt.Sprintf("--runtime=%d", int(aioRuntime.Seconds())),
		"--group_reporting", "--output-format=json",
	}
	out, err := exec.CommandContext(ctx, "fio", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("fio: %w: %s", err, oneLine(string(ee.Stderr)))
		}
		return Row{}, err
	}
	return parseFio(out)
}

// parseFio reads fio's JSON output (with --group_reporting: one job
// holding every job's sums).
func parseFio(out []byte) (Row, error) {
	var res struct {
		Jobs []struct {
			Error int `json:"error"`
			Read  struct {
				IOBytes  int64 `json:"io_bytes"`
				TotalIOs int64 `json:"total_ios"`
				// Runtime is in milliseconds.
				Runtime int64 `json:"runtime"`
			} `json:"read"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return Row{}, fmt.Errorf("fio's output: %w", err)
	}
	if len(res.Jobs) != 1 {
		return Row{}, fmt.Errorf("fio's output: %d job summaries, want 1", len(res.Jobs))
	}
	j := res.Jobs[0]
	if j.Error != 0 {
		return Row{}, fmt.Errorf("fio: job error %d", j.Error)
	}
	if j.Read.TotalIOs == 0 || j.Read.Runtime <= 0 {
		return Row{}, errors.New("fio read nothing")
	}
	return Row{Bytes: j.Read.IOBytes, Ops: j.Read.TotalIOs, Seconds: float64(j.Read.Runtime) / 1000}, nil
}

// runUncached reads the aio shapes through a ferry mount of their own,
// without a disk cache, each once (page cache dropped before).
func (b *bench) runUncached(ctx context.Context, ws []Workload) error {
	m, err := b.mountAt(ctx, "mnt-aio", "")
	if err != nil {
		return err
	}
	defer b.unmount(m)
	return b.measureCold(ctx, ws, m)
}

// measureCold measures each of ws once, cold, through the mount m.
func (b *bench) measureCold(ctx context.Context, ws []Workload, m *Mount) error {
	for _, w := range ws {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		b.measure(ctx, w, PhaseCold, "ferry", m.Dir, m)
	}
	return nil
}

// aioTarget is issue 32's goal: one thread's libaio IOPS over the 16
// threads' IOPS through ferry, in this run.
func aioTarget(rows []Row) (Target, bool) {
	one, ok1 := findRow(rows, aioShapes[0].name, PhaseCold)
	many, ok2 := findRow(rows, aioShapes[2].name, PhaseCold)
	if !ok1 || !ok2 {
		return Target{}, false
	}
	v := ratio(one.OpsRate(), many.OpsRate())
	return Target{
		What:  fmt.Sprintf("no disk cache: one thread, libaio, %d in flight, O_DIRECT, IOPS of %d threads' (psync)", aioDepth, aioDepth),
		Value: v, Want: ">= 80%", Met: v >= 0.8, AtLeast: 0.8,
		Shown: fmt.Sprintf("%.0f%% (%s / %s IOPS)", 100*v, strconv.FormatFloat(one.OpsRate(), 'f', 0, 64), strconv.FormatFloat(many.OpsRate(), 'f', 0, 64)),
	}, true
}

// dropAIOWithoutFio leaves the aio workload out of o, with a note, when
// fio is not installed; if it was all that was asked for, that is an
// error.
func dropAIOWithoutFio(o Options, fio string) (Options, string, error) {
	if fio != "" || !contains(o.Workloads, "aio") {
		return o, "", nil
	}
	if len(o.Workloads) == 1 {
		return o, "", errors.New("--workloads aio: fio is not installed (apt-get install fio)")
	}
	var kept []string
	for _, w := range o.Workloads {
		if w != "aio" {
			kept = append(kept, w)
		}
	}
	o.Workloads = kept
	return o, "aio: skipped, fio is not installed (apt-get install fio)", nil
}
