package control

// ferry invalidate: drop a mount's cached metadata, and optionally data,
// of a path.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
)

// InvalidateRequest is one `ferry invalidate`.
type InvalidateRequest struct {
	// Paths are files, directories or mount points on ferry mounts.
	Paths []string
	// Data also drops the disk cache of the files at or under each path.
	Data           bool
	Stdout, Stderr io.Writer
}

// Invalidate asks the daemon of each path's mount to drop what it has
// cached of it, and prints what was dropped. Paths that fail are reported
// on Stderr and make an *OperationError.
func Invalidate(ctx context.Context, req InvalidateRequest) error {
	failed := 0
	for _, p := range req.Paths {
		if err := invalidatePath(ctx, req.Stdout, p, req.Data); err != nil {
			fmt.Fprintf(req.Stderr, "ferry invalidate: %s: %v\n", p, err)
			failed++
		}
	}
	if failed > 0 {
		return &OperationError{fmt.Sprintf("invalidate: %d of %d paths failed", failed, len(req.Paths))}
	}
	return nil
}

func invalidatePath(ctx context.Context, stdout io.Writer, p string, data bool) error {
	socket, obj, dev, err := locate(p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	resp, err := call(ctx, socket, &request{Op: "invalidate", Path: obj, Data: data, Dev: dev})
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
