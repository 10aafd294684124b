// Package workload holds the read patterns the benchmark times, written
// against any directory: a ferry mount, a local copy of the same bytes, or
// another filesystem under test. Each one uses plain syscalls, as a
// training data loader does, and reports bytes and elapsed time.
//
// A workload only reads. It must never write under the directory it
// measures.
package workload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// Result is one timed run.
type Result struct {
	Bytes   int64
	Ops     int64 // files opened, records read, or entries stat'ed
	Elapsed time.Duration
}

// Rate is bytes per second.
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Bytes) / r.Elapsed.Seconds()
}

// OpsRate is operations per second.
func (r Result) OpsRate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Progress is told about bytes as they are read; may be nil.
type Progress func(n int64)

// Sequential reads each file whole, front to back, in bufSize reads;
// streams files are read at once (one stream per file, files handed out
// in order).
func Sequential(ctx context.Context, root string, files []string, streams int, bufSize int, progress Progress) (Result, error) {
	var total, ops atomic.Int64
	start := time.Now()
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(max(streams, 1))
	for _, name := range files {
		g.Go(func() error {
			f, err := os.Open(filepath.Join(root, name))
			if err != nil {
				return err
			}
			defer f.Close()
			buf := make([]byte, bufSize)
			for ctx.Err() == nil {
				n, err := f.Read(buf)
				total.Add(int64(n))
				if progress != nil && n > 0 {
					progress(int64(n))
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			ops.Add(1)
			return ctx.Err()
		})
	}
	err := g.Wait()
	return Result{Bytes: total.Load(), Ops: ops.Load(), Elapsed: time.Since(start)}, err
}

// Random reads count records of recordSize at uniformly random offsets of
// uniformly chosen files (ArrayRecord-style shards), from readers
// goroutines each issuing one synchronous pread at a time. The offsets
// depend only on seed, so two targets see the same requests.
func Random(ctx context.Context, root string, files []string, sizes []int64, readers, count int, recordSize int64, seed uint64, progress Progress) (Result, error) {
	if len(files) == 0 || len(files) != len(sizes) {
		return Result{}, errors.New("workload: random needs files with sizes")
	}
	handles := make([]*os.File, len(files))
	for i, name := range files {
		f, err := os.Open(filepath.Join(root, name))
		if err != nil {
			return Result{}, err
		}
		defer f.Close()
		handles[i] = f
	}
	var total, ops atomic.Int64
	start := time.Now()
	g, ctx := errgroup.WithContext(ctx)
	per := count / max(readers, 1)
	for r := range max(readers, 1) {
		g.Go(func() error {
			rng := rand.New(rand.NewPCG(seed, uint64(r)))
			buf := make([]byte, recordSize)
			for range per {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				i := rng.IntN(len(files))
				if sizes[i] < recordSize {
					continue
				}
				off := rng.Int64N(sizes[i] - recordSize + 1)
				n, err := handles[i].ReadAt(buf, off)
				if err != nil && !(err == io.EOF && int64(n) == recordSize) {
					return fmt.Errorf("%s at %d: %w", files[i], off, err)
				}
				total.Add(int64(n))
				ops.Add(1)
				if progress != nil {
					progress(int64(n))
				}
			}
			return nil
		})
	}
	err := g.Wait()
	return Result{Bytes: total.Load(), Ops: ops.Load(), Elapsed: time.Since(start)}, err
}

// Record is one record of a shard file: Size bytes at Offset.
type Record struct {
	File   int // index into the files slice
	Offset int64
	Size   int64
}

// RecordLayout cuts each shard into back-to-back records of recordSize,
// starting at a seeded offset below recordSize in each file so record
// boundaries fall anywhere (real ArrayRecord/TFRecord records do not line
// up with a cache's blocks), and returns count of them in a seeded
// shuffled order, each at most once: a sample of one epoch over the
// shards. It returns fewer when the shards hold fewer records.
func RecordLayout(sizes []int64, recordSize int64, count int, seed uint64) []Record {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	var all []Record
	for i, size := range sizes {
		if size < recordSize {
			continue
		}
		base := rng.Int64N(min(recordSize, size-recordSize+1))
		for off := base; off+recordSize <= size; off += recordSize {
			all = append(all, Record{File: i, Offset: off, Size: recordSize})
		}
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:min(count, len(all))]
}

// Records reads recs from readers goroutines, each issuing one synchronous
// pread at a time and taking the next record from a shared queue (as a
// shuffled data loader's workers do).
func Records(ctx context.Context, root string, files []string, recs []Record, readers int, progress Progress) (Result, error) {
	handles := make([]*os.File, len(files))
	for i, name := range files {
		f, err := os.Open(filepath.Join(root, name))
		if err != nil {
			return Result{}, err
		}
		defer f.Close()
		handles[i] = f
	}
	var total, ops, next atomic.Int64
	start := time.Now()
	g, ctx := errgroup.WithContext(ctx)
	for range max(readers, 1) {
		g.Go(func() error {
			var buf []byte
			for {
				i := next.Add(1) - 1
				if i >= int64(len(recs)) {
					return nil
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				r := recs[i]
				if int64(cap(buf)) < r.Size {
					buf = make([]byte, r.Size)
				}
				n, err := handles[r.File].ReadAt(buf[:r.Size], r.Offset)
				if err != nil && !(err == io.EOF && int64(n) == r.Size) {
					return fmt.Errorf("%s at %d: %w", files[r.File], r.Offset, err)
				}
				if int64(n) != r.Size {
					return fmt.Errorf("%s at %d: short read of %d bytes, want %d", files[r.File], r.Offset, n, r.Size)
				}
				total.Add(int64(n))
				ops.Add(1)
				if progress != nil {
					progress(int64(n))
				}
			}
		})
	}
	err := g.Wait()
	return Result{Bytes: total.Load(), Ops: ops.Load(), Elapsed: time.Since(start)}, err
}

// SmallFiles lists dir (as a loader does before an epoch), then readers
// goroutines each open, read whole and close files until all are read.
func SmallFiles(ctx context.Context, root, dir string, readers int, progress Progress) (Result, error) {
	start := time.Now()
	entries, err := os.ReadDir(filepath.Join(root, dir))
	if err != nil {
		return Result{}, err
	}
	var total, ops atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(max(readers, 1))
	var pool = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		g.Go(func() error {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			bp := pool.Get().(*[]byte)
			defer pool.Put(bp)
			f, err := os.Open(filepath.Join(root, dir, e.Name()))
			if err != nil {
				return err
			}
			defer f.Close()
			for {
				n, err := f.Read(*bp)
				total.Add(int64(n))
				if progress != nil && n > 0 {
					progress(int64(n))
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					return fmt.Errorf("%s: %w", e.Name(), err)
				}
			}
			ops.Add(1)
			return nil
		})
	}
	err = g.Wait()
	return Result{Bytes: total.Load(), Ops: ops.Load(), Elapsed: time.Since(start)}, err
}

// Walk stats every entry under root/dir, as `find -ls` or `ls -lR` does.
func Walk(ctx context.Context, root, dir string) (Result, error) {
	start := time.Now()
	var ops int64
	err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, err := os.Lstat(p); err != nil {
			return err
		}
		ops++
		return nil
	})
	return Result{Ops: ops, Elapsed: time.Since(start)}, err
}

// ReadSample reads size bytes at off of root/name with one pread per
// bufSize, for the MLPerf emulation's readers.
func ReadSample(root, name string, off, size int64, buf []byte) (int64, error) {
	f, err := os.Open(filepath.Join(root, name))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var done int64
	for done < size {
		want := min(int64(len(buf)), size-done)
		n, err := f.ReadAt(buf[:want], off+done)
		done += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// ListLong runs `ls -lR` over root/dir, as people and scripts walk a
// dataset: a directory read, then attributes of every entry (which the
// kernel gets with readdirplus). Ops counts the lines ls printed.
func ListLong(ctx context.Context, root, dir string) (Result, error) {
	start := time.Now()
	out, err := exec.CommandContext(ctx, "ls", "-lR", filepath.Join(root, dir)).Output()
	if err != nil {
		return Result{}, fmt.Errorf("ls -lR: %w", err)
	}
	return Result{Ops: int64(bytes.Count(out, []byte("\n"))), Elapsed: time.Since(start)}, nil
}

// Shuffled reads every file whole, in one seeded random order over all
// of them, readers files at a time: a DataLoader's epoch over a tree of
// small samples. Ops counts the files read.
func Shuffled(ctx context.Context, root string, files []string, readers int, seed uint64, progress Progress) (Result, error) {
	order := make([]int, len(files))
	for i := range order {
		order[i] = i
	}
	rand.New(rand.NewPCG(seed, 0x5eed)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var next, total, ops atomic.Int64
	start := time.Now()
	g, ctx := errgroup.WithContext(ctx)
	for range max(readers, 1) {
		g.Go(func() error {
			buf := make([]byte, 1<<20)
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				if k >= int64(len(order)) {
					return nil
				}
				n, err := readWhole(filepath.Join(root, files[order[k]]), buf)
				total.Add(n)
				if err != nil {
					return err
				}
				if progress != nil {
					progress(n)
				}
				ops.Add(1)
			}
			return ctx.Err()
		})
	}
	err := g.Wait()
	return Result{Bytes: total.Load(), Ops: ops.Load(), Elapsed: time.Since(start)}, err
}

// readWhole opens, reads to the end and closes one file.
func readWhole(path string, buf []byte) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	for {
		k, err := f.Read(buf)
		n += int64(k)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("%s: %w", path, err)
		}
	}
}

// CountLines runs a command (find, ls -lR) with its output counted as it
// streams, not kept: over a million-file tree the output alone is
// hundreds of megabytes. Ops is the number of lines.
func CountLines(ctx context.Context, name string, args ...string) (Result, error) {
	start := time.Now()
	cmd := exec.CommandContext(ctx, name, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return Result{}, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return Result{}, err
	}
	var lines int64
	buf := make([]byte, 256<<10)
	for {
		n, rerr := out.Read(buf)
		lines += int64(bytes.Count(buf[:n], []byte("\n")))
		if rerr != nil {
			break
		}
	}
	if err := cmd.Wait(); err != nil {
		return Result{Ops: lines, Elapsed: time.Since(start)}, fmt.Errorf("%s: %w: %s", name, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return Result{Ops: lines, Elapsed: time.Since(start)}, nil
}
