package main

// Commands that operate a running mount from outside it: `ferry warm`
// (read files into the disk cache, or with --check say how much of them is
// there) and `ferry invalidate` (drop cached metadata, and optionally
// data, of a path). Both run in the caller's process and talk to the
// daemon only through the mount itself (reads, and /proc/self/mountinfo
// to find which ferry mount a path is on) and that mount's control socket
// (control.go), so they work for any mount, in the background or not, and
// need no configuration.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"ferry/mountinfo"
)

// operationError is a command that ran but did not fully succeed (some
// files failed): exit status 1, like cp or rsync.
type operationError struct{ msg string }

func (e *operationError) Error() string { return e.msg }

// warmReadSize is each read(2) of warm: large, so the kernel sends ferry
// 1 MiB requests back to back and ferry's readahead sees one sequential
// stream per file.
const warmReadSize = 8 << 20

func warmCommand(inv *invocation) *cli.Command {
	return &cli.Command{
		Name:      "warm",
		Usage:     "read files or whole trees of a ferry mount into its disk cache (or, with --check, report how much is cached)",
		ArgsUsage: "PATH...",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "parallel", Aliases: []string{"p"}, Value: 8, Usage: "files read at once"},
			&cli.StringFlag{Name: "list", Usage: "also warm the paths in this file, one per line (- for stdin)"},
			&cli.BoolFlag{Name: "check", Usage: "fetch nothing: report how much of each PATH is in the disk cache"},
			&cli.StringFlag{Name: "progress", Value: "auto", Usage: "progress bar on stderr: auto (if a terminal), always or never"},
			&cli.BoolFlag{Name: "json", Usage: "print the summary as JSON"},
		},
		Action: func(c *cli.Context) error {
			paths := append([]string(nil), c.Args().Slice()...)
			if l := c.String("list"); l != "" {
				more, err := readPathList(l, os.Stdin)
				if err != nil {
					return usageError{Err: fmt.Errorf("--list: %w", err)}
				}
				paths = append(paths, more...)
			}
			if len(paths) == 0 {
				return usageError{Err: errors.New("warm: no PATH given (ferry warm [--check] PATH... or --list FILE)")}
			}
			if c.Int("parallel") < 1 {
				return usageError{Err: errors.New("--parallel must be at least 1")}
			}
			var bar bool
			switch c.String("progress") {
			case "auto":
				bar = isTerminal(inv.stderr)
			case "always":
				bar = true
			case "never":
			default:
				return usageError{Err: fmt.Errorf("--progress %q: use auto, always or never", c.String("progress"))}
			}
			if c.Bool("check") {
				return runCheck(c.Context, inv, paths, c.Bool("json"))
			}
			w := &warmer{parallel: c.Int("parallel"), stderr: inv.stderr}
			return w.run(c.Context, inv.stdout, paths, bar, c.Bool("json"))
		},
	}
}

func invalidateCommand(inv *invocation) *cli.Command {
	return &cli.Command{
		Name:      "invalidate",
		Usage:     "drop a ferry mount's cached metadata of PATH (a file, a directory and all below it, or the mount point for everything)",
		ArgsUsage: "PATH...",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "data", Usage: "also drop the disk cache of the files at or under PATH"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return usageError{Err: errors.New("invalidate: no PATH given (ferry invalidate [--data] PATH...)")}
			}
			failed := 0
			for _, p := range c.Args().Slice() {
				if err := invalidatePath(c.Context, inv.stdout, p, c.Bool("data")); err != nil {
					fmt.Fprintf(inv.stderr, "ferry invalidate: %s: %v\n", p, err)
					failed++
				}
			}
			if failed > 0 {
				return &operationError{fmt.Sprintf("invalidate: %d of %d paths failed", failed, c.NArg())}
			}
			return nil
		},
	}
}

// readPathList reads one path per line from name ("-": stdin), skipping
// blank lines.
func readPathList(name string, stdin io.Reader) ([]string, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	var paths []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := strings.TrimRight(sc.Text(), "\r"); strings.TrimSpace(line) != "" {
			paths = append(paths, line)
		}
	}
	return paths, sc.Err()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// errNotFerry says a path is not inside a ferry mount.
var errNotFerry = errors.New("not on a ferry mount")

// ferryMount finds the ferry mount that holds p, and p's object path in it
// ("/" for the mount root). p need not exist (an object added to the store
// since the last listing): its nearest existing ancestor is resolved,
// symlinks followed, and the rest appended.
func ferryMount(p string) (mountPoint, objPath string, err error) {
	dir, err := filepath.Abs(p)
	if err != nil {
		return "", "", err
	}
	var rest []string
	for {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			dir = real
			break
		}
		if !errors.Is(err, iofs.ErrNotExist) {
			return "", "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", "", errNotFerry
		}
		rest = append([]string{filepath.Base(dir)}, rest...)
		dir = parent
	}
	full := filepath.Join(append([]string{dir}, rest...)...)
	// The deepest mount containing full decides (the last one listed on
	// the same point is on top): a ferry mount with another file system
	// mounted inside it does not own that subtree.
	m, ok := mountinfo.Read().Holding(full)
	if !ok || m.FSType != mountinfo.FerryType {
		return "", "", errNotFerry
	}
	return m.Point, "/" + strings.TrimPrefix(strings.TrimPrefix(full, m.Point), "/"), nil
}

// controlSocketOf finds the control socket of the ferry mounted on
// mountPoint: where startControl puts it by default (a name derived from
// the mount point, also linked there when --control-socket put it
// elsewhere), or, for a mount by a user other than root, the abstract
// socket it falls back to.
func controlSocketOf(mountPoint string) (string, error) {
	def := defaultControlSocket(mountPoint)
	candidates := []string{def}
	if rt := userRuntimeDir(); rt != "" {
		candidates = append(candidates, filepath.Join(rt, "ferry", filepath.Base(def)))
	}
	m, _ := mountinfo.Top(mountPoint)
	var denied error
	for _, c := range candidates {
		_, err := os.Stat(c)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, iofs.ErrPermission) && denied == nil {
			denied = err // another place may still be ours
		}
	}
	hint := "see the daemon's log"
	if me := os.Getuid(); m.Owner > 0 {
		if me != m.Owner && me != 0 {
			return "", fmt.Errorf("the control socket of the ferry mount on %s is only for uid %d, who mounted it, and root", mountPoint, m.Owner)
		}
		if me == 0 {
			hint = fmt.Sprintf("a socket in uid %d's XDG_RUNTIME_DIR is found only by that user; or see the daemon's log", m.Owner)
		}
		// A user's daemon, which cannot use root's /run/ferry (denied
		// there means nothing): its abstract socket, if it has one.
		abstract := abstractControlSocket(m.Owner, mountPoint)
		if listening(abstract) {
			return abstract, nil
		}
		candidates = append(candidates, abstract)
		denied = nil
	}
	if denied != nil {
		return "", fmt.Errorf("the control socket of the ferry mount on %s: %w (it is only for the user running ferry, or root)", mountPoint, denied)
	}
	return "", fmt.Errorf("no control socket for the ferry mount on %s (looked for %s; %s)", mountPoint, strings.Join(candidates, ", "), hint)
}

// listening reports whether an abstract unix socket of this name listens
// in this network namespace, as /proc/net/unix lists them (without
// connecting to it).
func listening(abstract string) bool {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Num RefCount Protocol Flags Type St Inode Path: a listener has
		// flag __SO_ACCEPTCON (00010000), type stream (0001), and state
		// unconnected (01).
		fields := strings.Fields(sc.Text())
		if len(fields) == 8 && fields[7] == abstract && fields[3] == "00010000" && fields[4] == "0001" && fields[5] == "01" {
			return true
		}
	}
	return false
}

// cachedBytes is how many bytes of the file at path ferry's disk cache
// holds; ok is false if the mount has no disk cache. It asks the daemon
// through its control socket and fetches nothing.
func cachedBytes(path string) (n int64, ok bool, err error) {
	resp, err := askCached(path)
	if err != nil || resp.NoCache {
		return 0, false, err
	}
	return resp.CachedBytes, true, nil
}

// askCached asks the daemon of the mount holding path what its disk cache
// holds of the file.
func askCached(path string) (*controlResponse, error) {
	socket, obj, dev, err := locate(path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return callControl(ctx, socket, &controlRequest{Op: "cached", Path: obj, Dev: dev})
}

////////////////////////////////////////////////////////////////////////
// warm
////////////////////////////////////////////////////////////////////////

type warmFile struct {
	path string
	size int64
}

// warmer reads files through the mount, parallel files at a time.
type warmer struct {
	// Constant data
	parallel int
	stderr   io.Writer
	bar      *progressbar.ProgressBar // nil without a progress bar

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
		w.bar = progressbar.NewOptions64(-1,
			progressbar.OptionSetWriter(w.stderr),
			progressbar.OptionSetDescription("warming"),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowCount(),
			progressbar.OptionShowTotalBytes(true),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetWidth(30),
			progressbar.OptionFullWidth(),
		)
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
	if w.bar != nil {
		_ = w.bar.Finish()
		fmt.Fprintln(w.stderr)
	}
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
		fmt.Fprintf(stdout, "; %d errors\n", s.Errors)
	}
	if s.NoDiskCache {
		fmt.Fprintln(w.stderr, "ferry warm: the mount has no disk cache (--cache-dir); only the kernel page cache was warmed")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.Errors > 0 {
		return &operationError{fmt.Sprintf("warm: %d errors", s.Errors)}
	}
	if s.NotKeptFiles > 0 {
		return &operationError{fmt.Sprintf("warm: the disk cache does not hold %s of %d files it read: it is smaller than the data (--cache-size, --cache-min-free), or other reads evicted them",
			humanize.IBytes(uint64(s.NotKeptBytes)), s.NotKeptFiles)}
	}
	return nil
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
	w.bar.Describe(fmt.Sprintf("%d/%s files", w.files.Load()+w.cachedFiles.Load()+w.failed.Load(), total))
}

func (w *warmer) fail(path string, err error) {
	w.failed.Add(1)
	w.errMu.Lock()
	defer w.errMu.Unlock()
	if w.bar != nil {
		_ = w.bar.Clear()
	}
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
		if w.bar != nil {
			w.bar.ChangeMax64(w.scannedBytes.Load())
		}
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
	if w.bar != nil && n > 0 {
		_ = w.bar.Add64(n)
	}
}

////////////////////////////////////////////////////////////////////////
// warm --check
////////////////////////////////////////////////////////////////////////

// checkResult is how much of one PATH the disk cache holds.
type checkResult struct {
	Path        string  `json:"path"`
	Files       int64   `json:"files"`
	Bytes       int64   `json:"bytes"`
	CachedBytes int64   `json:"cached_bytes"`
	Percent     float64 `json:"percent"`
	Errors      int64   `json:"errors"`
}

func (r *checkResult) finish() {
	r.Percent = 100
	if r.Bytes > 0 {
		r.Percent = 100 * float64(r.CachedBytes) / float64(r.Bytes)
	}
}

func runCheck(ctx context.Context, inv *invocation, paths []string, asJSON bool) error {
	var results []checkResult
	// The total counts a file once, however many PATHs contain it.
	total := checkResult{Path: "total"}
	seen := map[string]bool{}
	for _, root := range paths {
		r := checkResult{Path: root}
		err := checkTree(ctx, root, &r, &total, seen, inv.stderr)
		if err != nil {
			fmt.Fprintf(inv.stderr, "ferry warm --check: %s: %v\n", root, err)
			r.Errors++
			total.Errors++
		}
		r.finish()
		results = append(results, r)
	}
	total.finish()
	if asJSON {
		_ = json.NewEncoder(inv.stdout).Encode(struct {
			Paths []checkResult `json:"paths"`
			Total checkResult   `json:"total"`
		}{results, total})
	} else {
		line := func(r checkResult) {
			fmt.Fprintf(inv.stdout, "%6.1f%%  %10s of %-10s  %6d files  %s\n", r.Percent,
				humanize.IBytes(uint64(r.CachedBytes)), humanize.IBytes(uint64(r.Bytes)), r.Files, r.Path)
		}
		for _, r := range results {
			line(r)
		}
		if len(results) > 1 {
			line(total)
		}
	}
	if total.Errors > 0 {
		return &operationError{fmt.Sprintf("warm --check: %d errors", total.Errors)}
	}
	return nil
}

// checkTree adds up sizes and cached bytes of the files at or under root
// into r, and into total those of files not yet seen.
func checkTree(ctx context.Context, root string, r, total *checkResult, seen map[string]bool, stderr io.Writer) error {
	if _, err := os.Stat(root); err != nil {
		return err
	}
	if _, _, err := ferryMount(root); err != nil {
		return err
	}
	return filepath.WalkDir(root, func(p string, d iofs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			fmt.Fprintf(stderr, "ferry warm --check: %s: %v\n", p, err)
			r.Errors++
			total.Errors++
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			fmt.Fprintf(stderr, "ferry warm --check: %s: %v\n", p, err)
			r.Errors++
			total.Errors++
			return nil
		}
		n, ok, err := cachedBytes(p)
		if err != nil {
			fmt.Fprintf(stderr, "ferry warm --check: %s: %v\n", p, err)
			r.Errors++
			total.Errors++
			return nil
		}
		if !ok {
			return errors.New("the mount has no disk cache (--cache-dir)")
		}
		n = min(n, info.Size())
		r.Files++
		r.Bytes += info.Size()
		r.CachedBytes += n
		if abs, err := filepath.Abs(p); err != nil || !seen[abs] {
			seen[abs] = true
			total.Files++
			total.Bytes += info.Size()
			total.CachedBytes += n
		}
		return nil
	})
}

////////////////////////////////////////////////////////////////////////
// invalidate
////////////////////////////////////////////////////////////////////////

// locate finds the control socket of the mount holding p and p's object
// path. p itself may not exist (an object added to the store since it was
// last listed).
func locate(p string) (socket, objPath, dev string, err error) {
	mp, obj, err := ferryMount(p)
	if err != nil {
		return "", "", "", err
	}
	if dev, err = mountinfo.DeviceOf(mp); err != nil {
		return "", "", "", err
	}
	socket, err = controlSocketOf(mp)
	return socket, obj, dev, err
}

func invalidatePath(ctx context.Context, stdout io.Writer, p string, data bool) error {
	socket, obj, dev, err := locate(p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	resp, err := callControl(ctx, socket, &controlRequest{Op: "invalidate", Path: obj, Data: data, Dev: dev})
	if err != nil {
		if errors.Is(err, syscall.EACCES) {
			return fmt.Errorf("%w (the control socket is only for the user running ferry, or root)", err)
		}
		return err
	}
	fmt.Fprintf(stdout, "invalidated %s: %d cached entries, %d kernel entries", p, resp.CacheItems, resp.KernelEntries)
	if data {
		fmt.Fprintf(stdout, ", %d cached files (%s)", resp.DataEntries, humanize.IBytes(uint64(resp.DataBytes)))
	}
	fmt.Fprintln(stdout)
	return nil
}
