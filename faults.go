package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// detachMount detaches the topmost mount on dir lazily (umount -l): the
// mount point is free at once, and a FUSE daemon still alive keeps
// serving the files open on it until they are closed. Root unmounts
// directly; other users go through fusermount, which may detach their
// own FUSE mounts.
func detachMount(dir string) error {
	err := syscall.Unmount(dir, syscall.MNT_DETACH)
	if err == nil || !errors.Is(err, syscall.EPERM) {
		return err
	}
	for _, name := range []string{"fusermount3", "fusermount"} {
		path, lerr := exec.LookPath(name)
		if lerr != nil {
			continue
		}
		out, ferr := exec.Command(path, "-u", "-z", dir).CombinedOutput()
		if ferr != nil {
			return fmt.Errorf("%s -u -z: %v: %s", name, ferr, oneLine(string(out)))
		}
		return nil
	}
	return err
}

// repairDeadMount detaches dead ferry mounts from dir: a daemon that was
// killed (kill -9, OOM) leaves its mount behind, and every access to dir
// then fails with ENOTCONN. Containers and systemd restart ferry on the
// same directory, so ferry clears its own dead mounts instead of
// refusing; a dead mount of another file system is left alone. It
// returns dir's Stat after the repair.
func repairDeadMount(dir string) (os.FileInfo, error) {
	// Mounts may be stacked; each detach uncovers the next one.
	for range 8 {
		if t, _ := mountType(dir); t != "fuse.ferry" || !deadFUSE(dir) {
			break
		}
		if derr := detachMount(dir); derr != nil {
			return nil, fmt.Errorf("mount point %s is a dead ferry mount and cannot be detached: %v; run fusermount3 -uz %s", dir, derr, dir)
		}
	}
	return os.Stat(dir)
}

// deadFUSE reports whether the FUSE mount on dir has lost its daemon.
// stat(2) is no test: the kernel may answer it from its attribute cache
// (for ever, with --metadata-ttl -1); statfs(2) always asks the daemon.
// A daemon that is alive but stuck never answers: after a few seconds
// the mount counts as alive (and is then refused as already mounted),
// so that mount(8) never hangs on it; the goroutine is left behind.
func deadFUSE(dir string) bool {
	res := make(chan error, 1)
	go func() {
		var st syscall.Statfs_t
		res <- syscall.Statfs(dir, &st)
	}()
	select {
	case err := <-res:
		return errors.Is(err, syscall.ENOTCONN)
	case <-time.After(5 * time.Second):
		return false
	}
}

// checkEmpty refuses to hide files: mounting over a directory that has
// entries makes them invisible until unmount, which is rarely meant.
func checkEmpty(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	if len(names) > 0 {
		return fmt.Errorf("mount point %s is not empty (mounting would hide its files); give --nonempty (fstab: nonempty) to mount over it anyway", dir)
	}
	return nil
}

// cacheDiskFailed reports whether the disk cache could not open because
// its volume is read-only or full: failures of the disk, not of the
// configuration (a wrong path or permissions still fail the mount).
func cacheDiskFailed(err error) bool {
	return errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// cacheDisabledGauge reports a mount that asked for a disk cache and runs
// without one.
func cacheDisabledGauge() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ferry_cache_disabled",
		Help: "1 when --cache-dir was given but the disk cache could not be opened (read-only or full volume).",
	})
	g.Set(1)
	return g
}

// heapOverhead is what the process may use besides the read buffers that
// --memory-limit accounts: the metadata cache, FUSE and HTTP buffers, the
// runtime.
const heapOverhead = 48 << 20

// limitHeap tells the Go runtime the memory budget. readahead accounts
// every buffer against --memory-limit, but without a runtime limit the
// GC lets the heap grow to twice what is live, and pooled buffers waiting
// for reuse are not accounted at all: a 128 MiB budget peaked at 245 MiB
// RSS in the soak test. GOMEMLIMIT, if set, wins.
//
// The function returned (nil when there is no limit to keep) is
// readahead's Config.OffHeap: buffers mapped outside the Go heap lower
// the runtime's limit, ours or GOMEMLIMIT's, by as much (down to
// heapOverhead at most), so that the heap and they stay within it
// together.
func limitHeap(memoryLimit int64, logger *slog.Logger) func(offHeap int64) {
	var base int64
	switch {
	case os.Getenv("GOMEMLIMIT") != "":
		base = debug.SetMemoryLimit(-1) // reads it
	case memoryLimit > 0:
		base = memoryLimit + heapOverhead
		debug.SetMemoryLimit(base)
		logger.Debug("runtime memory limit set", "bytes", base)
	default:
		return nil
	}
	floor := min(base, heapOverhead)
	return func(offHeap int64) {
		debug.SetMemoryLimit(max(base-max(offHeap, 0), floor))
	}
}
