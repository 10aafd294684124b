package control

// ferry warm --check: how much of some files the disk cache holds,
// fetching nothing.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// Check reports how much of the files at or under req.Paths the disk
// cache holds, per PATH and in total (req.Parallel and req.Progress are
// not used). Files it cannot ask about make an *OperationError.
func Check(ctx context.Context, req WarmRequest) error {
	paths, asJSON := req.Paths, req.JSON
	var results []checkResult
	// The total counts a file once, however many PATHs contain it.
	total := checkResult{Path: "total"}
	seen := map[string]bool{}
	for _, root := range paths {
		r := checkResult{Path: root}
		err := checkTree(ctx, root, &r, &total, seen, req.Stderr)
		if err != nil {
			fmt.Fprintf(req.Stderr, "ferry warm --check: %s: %v\n", root, err)
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
		for _, r := range results {
			line(r)
		}
		if len(results) > 1 {
			line(total)
		}
	}
	if total.Errors > 0 {
		return &OperationError{fmt.Sprintf("warm --check: %d errors", total.Errors)}
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
