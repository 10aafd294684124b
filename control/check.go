package control

// ferry warm --check: how much of some files the disk cache holds,
// fetching nothing.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"

	"github.com/dustin/go-humanize"
)

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

// errNoDiskCache: the PATH is on a mount without a disk cache, where
// there is nothing to check.
var errNoDiskCache = errors.New("the mount has no disk cache: nothing to check (mount it with --cache-dir to keep what is read on local disk)")

// Check reports how much of the files at or under req.Paths the disk
// cache holds, per PATH and in total (req.Parallel and req.Progress are
// not used). Files it cannot ask about make an *OperationError. Each
// problem is said once: a single one is the error itself; several are
// printed, one line each, and the error counts them.
func Check(ctx context.Context, req WarmRequest) error {
	paths, asJSON := req.Paths, req.JSON
	var results []checkResult
	var problems []string
	// The total counts a file once, however many PATHs contain it.
	total := checkResult{Path: "total"}
	seen := map[string]bool{}
	for _, root := range paths {
		r := checkResult{Path: root}
		err := checkTree(ctx, root, &r, &total, seen, &problems)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", root, err))
			r.Errors++
			total.Errors++
		}
		r.finish()
		results = append(results, r)
	}
	total.finish()
	if asJSON {
		_ = json.NewEncoder(req.Stdout).Encode(struct {
			Paths []checkResult `json:"paths"`
			Total checkResult   `json:"total"`
		}{results, total})
	} else {
		line := func(r checkResult) {
			fmt.Fprintf(req.Stdout, "%6.1f%%  %10s of %-10s  %6d files  %s\n", r.Percent,
				humanize.IBytes(uint64(r.CachedBytes)), humanize.IBytes(uint64(r.Bytes)), r.Files, r.Path)
		}
		shown := 0
		for _, r := range results {
			if r.Files > 0 || r.Errors == 0 { // not a PATH that could not be checked at all
				line(r)
				shown++
			}
		}
		if shown > 1 {
			line(total)
		}
	}
	switch len(problems) {
	case 0:
		return nil
	case 1:
		return &OperationError{"warm --check: " + problems[0]}
	}
	for _, p := range problems {
		fmt.Fprintf(req.Stderr, "ferry warm --check: %s\n", p)
	}
	return &OperationError{fmt.Sprintf("warm --check: %d problems (above)", len(problems))}
}

// checkTree adds up sizes and cached bytes of the files at or under root
// into r, and into total those of files not yet seen; a file it cannot
// ask about is added to problems. An error is about root as a whole.
func checkTree(ctx context.Context, root string, r, total *checkResult, seen map[string]bool, problems *[]string) error {
	if _, err := os.Stat(root); err != nil {
		return err
	}
	if _, _, err := ferryMount(root); err != nil {
		return err
	}
	problem := func(p string, err error) error {
		*problems = append(*problems, fmt.Sprintf("%s: %v", p, err))
		r.Errors++
		total.Errors++
		return nil // keep going with the rest of the tree
	}
	return filepath.WalkDir(root, func(p string, d iofs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return problem(p, err)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return problem(p, err)
		}
		n, ok, err := cachedBytes(p)
		if err != nil {
			return problem(p, err)
		}
		if !ok {
			return errNoDiskCache
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
