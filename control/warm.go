package control

// ferry warm: read files through the mount, so that they land in its disk
// cache, skipping those it holds already.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"
	"golang.org/x/sys/unix"

	"ferry/progress"
)

// warmReadSize is each read(2) of warm: large, so the kernel sends ferry
// 1 MiB requests back to back and ferry's readahead sees one sequential
// stream per file.
const warmReadSize = 8 << 20

// WarmRequest is one `ferry warm` (or, for Check, `ferry warm --check`).
type WarmRequest struct {
	// Paths are files and trees on ferry mounts.
	Paths []string
	// Parallel is how many files are read at once (at least 1).
	Parallel int
	// Progress shows a progress bar on Stderr (whatever Stderr is: the
	// caller decided).
	Progress bool
	// JSON prints the summary as JSON.
	JSON           bool
	Stdout, Stderr io.Writer
}

// Warm reads the files at or under req.Paths through their mounts unless
// the disk cache holds them already, then checks that it kept them. It
// prints a summary; files that failed, or that the cache did not keep,
// make an *OperationError.
func Warm(ctx context.Context, req WarmRequest) error {
	w := &warmer{parallel: req.Parallel, stderr: req.Stderr}
	return w.run(ctx, req.Stdout, req.Paths, req.Progress, req.JSON)
}

type warmFile struct {
	path string
	size int64
}

// warmer reads files through the mount, parallel files at a time.
type warmer struct {
	// Constant data
	parallel int
	stderr   io.Writer
	bar      *progress.Bar // nil without a progress bar

	// Mutable state
	files, bytes          atomic.Int64 // read now
	cachedFiles, cached   atomic.Int64 // already fully cached, skipped
	scanned, scannedBytes atomic.Int64
	failed                atomic.Int64
	noDiskCache           atomic.Bool
	noCheck               sync.Once // the control socket could not be asked
	// Files read, checked again at the end: a cache smaller than the
	// data evicts what it took earlier.
	readMu sync.Mutex
	read   []warmFile
	errMu  sync.Mutex // serialises error lines with the bar
}

// warmSummary is what warm reports.
type warmSummary struct {
	Files        int64   `json:"files"`
	Bytes        int64   `json:"bytes"`
	CachedFiles  int64   `json:"already_cached_files"`
	CachedBytes  int64   `json:"already_cached_bytes"`
	Seconds      float64 `json:"seconds"`
	BytesPerSec  float64 `json:"bytes_per_second"`
	Errors       int64   `json:"errors"`
	NoDiskCache  bool    `json:"no_disk_cache,omitempty"`
	ScannedFiles int64   `json:"scanned_files"`
	// Read, but not (all) in the disk cache afterwards: it is smaller
	// than the data, or another reader's data evicted it.
	NotKeptFiles int64 `json:"not_kept_files"`
	NotKeptBytes int64 `json:"not_kept_bytes"`
}

func (w *warmer) run(ctx context.Context, stdout io.Writer, paths []string, showBar bool, asJSON bool) error {
	start := time.Now()
	if showBar {
		w.bar = progress.New(progress.Config{Writer: w.stderr, Label: "warming", Force: true})
	}
	jobs := make(chan warmFile, 1024)
	var scanDone atomic.Bool
	go func() {
		defer close(jobs)
		seen := map[string]bool{} // a file named twice (a tree and --list) is read once
		for _, p := range paths {
			w.scan(ctx, p, jobs, seen)
		}
		scanDone.Store(true)
		w.describe(true)
	}()
	var wg sync.WaitGroup
	for range w.parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, warmReadSize)
			for f := range jobs {
				if ctx.Err() != nil {
					continue // drain
				}
				w.warm(f, buf)
				w.describe(scanDone.Load())
			}
		}()
	}
	wg.Wait()
	w.bar.Finish()
	var notKeptFiles, notKeptBytes int64
	if ctx.Err() == nil { // not after Ctrl-C: that waits for nothing
		notKeptFiles, notKeptBytes = w.notKept()
	}
	secs := time.Since(start).Seconds()
	s := warmSummary{
		NotKeptFiles: notKeptFiles, NotKeptBytes: notKeptBytes,
		Files: w.files.Load(), Bytes: w.bytes.Load(),
		CachedFiles: w.cachedFiles.Load(), CachedBytes: w.cached.Load(),
		Seconds: secs, Errors: w.failed.Load(), NoDiskCache: w.noDiskCache.Load(),
		ScannedFiles: w.scanned.Load(),
	}
	if secs > 0 {
		s.BytesPerSec = float64(s.Bytes) / secs
	}
	if asJSON {
		_ = json.NewEncoder(stdout).Encode(&s)
	} else {
		fmt.Fprintf(stdout, "warmed %d files, %s in %.1fs (%s/s)",
			s.Files, humanize.IBytes(uint64(s.Bytes)), s.Seconds, humanize.IBytes(uint64(s.BytesPerSec)))
		if s.CachedFiles > 0 {
			fmt.Fprintf(stdout, "; %d files (%s) were already cached", s.CachedFiles, humanize.IBytes(uint64(s.CachedBytes)))
		}
		fmt.Fprintf(stdout, "; %s\n", countErrors(s.Errors))
	}
	if s.NoDiskCache {
		fmt.Fprintln(w.stderr, "ferry warm: the mount has no disk cache (--cache-dir); only the kernel page cache was warmed")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.Errors > 0 {
		return &OperationError{"warm: " + countErrors(s.Errors)}
	}
	if s.NotKeptFiles > 0 {
		return &OperationError{fmt.Sprintf("warm: the disk cache does not hold %s of %d files it read: it is smaller than the data (--cache-size, --cache-min-free), or other reads evicted them",
			humanize.IBytes(uint64(s.NotKeptBytes)), s.NotKeptFiles)}
	}
	return nil
}

// countErrors is "1 error", "2 errors".
func countErrors(n int64) string {
	if n == 1 {
		return "1 error"
	}
	return fmt.Sprintf("%d errors", n)
}

// describe updates the bar's file counts.
func (w *warmer) describe(scanned bool) {
	if w.bar == nil {
		return
	}
	total := strconv.FormatInt(w.scanned.Load(), 10)
	if !scanned {
		total += "+"
	}
	w.bar.SetNote(fmt.Sprintf("%d/%s files", w.files.Load()+w.cachedFiles.Load()+w.failed.Load(), total))
}

func (w *warmer) fail(path string, err error) {
	w.failed.Add(1)
	w.errMu.Lock()
	defer w.errMu.Unlock()
	w.bar.Clear()
	fmt.Fprintf(w.stderr, "ferry warm: %s: %v\n", path, err)
}

// scan sends every regular file at or under root to jobs, growing the
// bar's total as it goes.
func (w *warmer) scan(ctx context.Context, root string, jobs chan<- warmFile, seen map[string]bool) {
	if _, err := os.Stat(root); err != nil {
		w.fail(root, err)
		return
	}
	if _, _, err := ferryMount(root); err != nil {
		w.fail(root, err)
		return
	}
	// WalkDir does not follow a link given as its root (a link to the
	// mount, or into it): walk what it names.
	if real, err := filepath.EvalSymlinks(root); err == nil {
		root = real
	}
	found := 0 // files under root, also those named before
	defer func() {
		if found == 0 && ctx.Err() == nil {
			w.fail(root, errors.New("no files found"))
		}
	}()
	err := filepath.WalkDir(root, func(p string, d iofs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			w.fail(p, err)
			return nil // keep going with the rest of the tree
		}
		if !d.Type().IsRegular() {
			return nil
		}
		found++
		if abs, err := filepath.Abs(p); err == nil {
			if seen[abs] {
				return nil
			}
			seen[abs] = true
		}
		info, err := d.Info()
		if err != nil {
			w.fail(p, err)
			return nil
		}
		w.scanned.Add(1)
		w.scannedBytes.Add(info.Size())
		w.bar.SetTotal(w.scannedBytes.Load())
		jobs <- warmFile{path: p, size: info.Size()}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		w.fail(root, err)
	}
}

// warm reads one file through the mount unless the disk cache already
// holds all of it. A file the mount opened ahead of its reader (this
// warm's reads of the files before it, in listing order) is read all the
// same: its bytes came for warm, not before it, and the read takes them
// over.
func (w *warmer) warm(f warmFile, buf []byte) {
	resp, err := askCached(f.path)
	asked := err == nil
	if errors.Is(err, errNotFerry) {
		w.fail(f.path, err)
		return
	}
	var cached int64
	hasCache, ahead := true, false
	if err != nil {
		// The daemon cannot be asked (its socket is root's, or missing):
		// what is cached is unknown, so read everything; the reads fill
		// the cache all the same.
		w.noCheck.Do(func() {
			w.errMu.Lock()
			defer w.errMu.Unlock()
			fmt.Fprintf(w.stderr, "ferry warm: cannot ask the mount what it has cached (%v); reading every file\n", err)
		})
	} else {
		cached, hasCache, ahead = resp.CachedBytes, !resp.NoCache, resp.OpenedAhead
	}
	if !hasCache {
		w.noDiskCache.Store(true)
	}
	if hasCache && cached >= f.size && !ahead {
		w.cachedFiles.Add(1)
		w.cached.Add(f.size)
		w.progress(f.size)
		return
	}
	fd, err := os.Open(f.path)
	if err != nil {
		w.fail(f.path, err)
		return
	}
	defer fd.Close()
	if hasCache {
		// Pages the kernel still holds would be served without asking
		// ferry, and so never reach the disk cache: drop them first. And
		// drop what this read leaves behind, so that warming a dataset
		// larger than memory does not push the trainer's pages out.
		_ = unix.Fadvise(int(fd.Fd()), 0, 0, unix.FADV_DONTNEED)
		defer unix.Fadvise(int(fd.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
	var n int64
	for {
		m, err := fd.Read(buf)
		n += int64(m)
		w.progress(int64(m))
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			w.fail(f.path, err)
			w.bytes.Add(n)
			return
		}
	}
	w.files.Add(1)
	w.bytes.Add(n)
	if asked && hasCache {
		w.readMu.Lock()
		w.read = append(w.read, f)
		w.readMu.Unlock()
	}
}

// notKept checks every file read, once the last writes have landed, and
// returns how many bytes the cache does not hold (one question to the
// daemon per file; nothing is read).
func (w *warmer) notKept() (files, bytes int64) {
	// Cache writes run just after the reader has its bytes: give them a
	// few seconds to land before counting what is missing.
	pending := w.read
	for deadline := time.Now().Add(5 * time.Second); len(pending) > 0; {
		files, bytes = 0, 0
		var still []warmFile
		for _, f := range pending {
			if now, _, err := cachedBytes(f.path); err == nil && now < f.size {
				files++
				bytes += f.size - now
				still = append(still, f)
			}
		}
		pending = still
		if len(pending) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return files, bytes
}

func (w *warmer) progress(n int64) {
	w.bar.Add(n)
}
