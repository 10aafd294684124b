package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ferry/bucket/connect"
	"ferry/bucket/gcs"
	"ferry/bucket/retry"
	"ferry/control"
	"ferry/daemon"
	"ferry/filecache"
	"ferry/flags"
	"ferry/fs"
	"ferry/metadata"
	"ferry/readahead"
)

// mountStack builds the file system cfg describes, store -> metadata ->
// disk cache -> readahead -> fs, with the control socket beside it, and
// mounts it. It is package daemon's Mounter: ctx is cancelled by a signal
// during setup, and what it opens is closed through s.Cleanup, last
// first, when the mount ends or fails.
func mountStack(ctx context.Context, cfg *flags.Config, s *daemon.Setup) (daemon.Mounted, error) {
	log, reg := s.Logger, s.Registry
	reg.MustRegister(readBuildVersion().buildInfoGauge())
	offHeap := limitHeap(cfg.MemoryLimit, cfg.MetadataLimit, log)

	b, err := connect.Open(ctx, cfg.Source, storeOptions(cfg, log, reg))
	if err != nil {
		return nil, withFlagHint(err) // names the URL already
	}
	s.Cleanup(func() { b.Close() })
	// A missing bucket or bad credentials fail the mount now, in the
	// caller's terminal, rather than as EIO on the first ls.
	if err := connect.Probe(ctx, b); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Source, err)
	}

	meta, err := metadata.New(metadata.Config{Bucket: b, TTL: cfg.MetadataTTL, NegativeTTL: cfg.NegativeTTL,
		MemoryLimit: cfg.MetadataLimit, Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	s.Cleanup(meta.Close)

	// The disk cache as readahead and the control socket use it: nil
	// interfaces, not a nil *Store, without one.
	var cache readahead.BlockCache
	var dropper control.Cache
	store, err := openCache(cfg, log, reg)
	if err != nil {
		return nil, err
	}
	if store != nil {
		s.Cleanup(func() { store.Close() })
		cache, dropper = store, store
	}

	fetcher, err := readahead.New(readahead.Config{Bucket: b, Cache: cache,
		MemoryLimit: cfg.MemoryLimit, MaxConnections: cfg.MaxConnections, OffHeap: offHeap,
		Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	s.Cleanup(fetcher.Close)
	if ctx.Err() != nil {
		return nil, errors.New("interrupted before mounting")
	}

	// The control socket listens before mounting, so that clients can
	// reach it as soon as the mount is visible.
	fsControl := fs.NewControl() // bound to the file system by fs.Mount
	ctl, err := control.Listen(control.Config{MountPoint: cfg.MountPoint, Socket: cfg.ControlSocket,
		FS: fsControl, Cache: dropper, Metrics: s.Gatherer, ConstLabels: s.Labels, Logger: log})
	if err != nil {
		return nil, err
	}
	s.Cleanup(ctl.Close)

	// The file system serves until unmounted: not for as long as ctx.
	mfs, err := fs.Mount(context.WithoutCancel(ctx), cfg.MountPoint, fs.Config{
		Metadata:       meta,
		Content:        fetcher,
		ReadAheadFiles: cfg.ReadAheadFiles,
		Passthrough:    store != nil && cfg.CachePassthrough,
		Splice:         store != nil && cfg.CachePassthrough,
		Uid:            cfg.Uid, Gid: cfg.Gid, FileMode: cfg.FileMode, DirMode: cfg.DirMode,
		Logger: log, Registerer: reg,
		Control: fsControl,
	}, mountOptions(cfg))
	if err != nil {
		return nil, fmt.Errorf("mounting %s: %w", cfg.MountPoint, err)
	}
	ctl.Mounted(cfg.MountPoint)
	return mfs, nil
}

// withFlagHint adds to a store's error the flag that fixes it, where one
// does: the packages below name no flags.
func withFlagHint(err error) error {
	if errors.Is(err, gcs.ErrNoCredentials) {
		return fmt.Errorf("%w: add --anonymous for a public bucket, or give --key-file FILE", err)
	}
	return err
}

// mountOptions are fs.Mount's kernel-facing options for cfg.
func mountOptions(cfg *flags.Config) fs.MountOptions {
	return fs.MountOptions{
		AllowOther:    cfg.AllowOther,
		ReadAheadKB:   cfg.ReadAheadKB,
		MaxBackground: cfg.MaxBackground,
		FSName:        cfg.Source,
		Debug:         cfg.Debug,
		KernelOptions: cfg.KernelOptions,
	}
}

// storeOptions are connect.Open's options for cfg.
func storeOptions(cfg *flags.Config, log *slog.Logger, reg prometheus.Registerer) connect.Options {
	conns, timeout := cfg.MaxConnections, cfg.StoreTimeout
	if strings.HasPrefix(cfg.Source, "file:") {
		// connect refuses network options for local directories
		conns, timeout = 0, 0
	}
	return connect.Options{
		Endpoint:       cfg.Endpoint,
		Anonymous:      cfg.Anonymous,
		Region:         cfg.Region,
		S3PathStyle:    cfg.S3PathStyle,
		KeyFile:        cfg.KeyFile,
		BillingProject: cfg.BillingProject,
		MaxConnections: conns,
		Timeout:        timeout,
		// A body that trickles under 64 KiB per --store-timeout (at least
		// 30 s: a floor per connection, and 32 share a slow link) is as
		// stuck as a silent one.
		Retry:      retry.Config{MaxElapsed: cfg.RetryMaxTime, SlowWindow: slowWindow(timeout)},
		Registerer: reg,
		Logger:     log,
	}
}

// slowWindow is the retry reader's SlowWindow for a --store-timeout: off
// without one (local directories), else at least 30 s.
func slowWindow(storeTimeout time.Duration) time.Duration {
	if storeTimeout <= 0 {
		return 0
	}
	return max(storeTimeout, 30*time.Second)
}

// openCache opens the disk cache of --cache-dir, creating it if need be;
// nil without one. A cache volume gone read-only or full must not stop
// the mount (a restart would never come back): it is served from the
// store, said once in the log and in the ferry_cache_disabled metric. A
// wrong path or permissions still fail the mount.
func openCache(cfg *flags.Config, log *slog.Logger, reg prometheus.Registerer) (*filecache.Store, error) {
	if cfg.CacheDir == "" {
		return nil, nil
	}
	store, err := openCacheDir(cfg, log, reg)
	switch {
	case err != nil && cacheDiskFailed(err):
		log.Error("disk cache unavailable; reading from the store only", "cache_dir", cfg.CacheDir, "err", err)
		reg.MustRegister(cacheDisabledGauge())
		return nil, nil
	case err != nil:
		return nil, &flags.OptionError{Option: "cache-dir", Err: err}
	}
	return store, nil
}

// openCacheDir creates (if need be) and opens the disk cache. A new
// cache directory on a read-only or full volume fails like an existing
// one there.
func openCacheDir(cfg *flags.Config, log *slog.Logger, reg prometheus.Registerer) (*filecache.Store, error) {
	if err := os.MkdirAll(cfg.CacheDir, 0o700); err != nil {
		return nil, err
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(cfg.CacheDir, &st); err != nil {
		return nil, err
	}
	maxSize, minFree := cfg.CacheBudget(st.Blocks * uint64(st.Bsize))
	// Whether the kernel should offer passthrough; the mount finds out
	// for sure.
	passthrough, _ := fs.PassthroughExpected()
	return filecache.Open(filecache.Config{
		Dir:       cfg.CacheDir,
		MaxSize:   maxSize,
		MinFree:   minFree,
		BlockSize: cfg.CacheBlockSize,
		// The store's name for the cache's keys: the endpoint and the
		// full source (with prefix), since object names are relative to
		// it.
		BucketID:   cfg.Endpoint + "|" + cfg.Source,
		Logger:     log,
		Registerer: reg,
		// Blocks checked once in the mount may be spliced from their
		// file (filecache/splice.go), under the same trust as
		// passthrough.
		Splice: cfg.CachePassthrough,
		// Passthrough's first open of a small file trusts the check
		// its write made; on a kernel without passthrough nothing
		// would.
		CheckWrites: cfg.CachePassthrough && passthrough,
	})
}

// cacheDiskFailed reports whether the disk cache could not open because
// its volume is read-only or full: failures of the disk, not of the
// configuration.
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
// --memory-limit accounts and the metadata that --metadata-limit does:
// FUSE and HTTP buffers, the disk cache's index, the runtime. It is also
// the floor of the runtime's limit.
const heapOverhead = 64 << 20

// heapOverBuffers is the least the runtime's limit gives over
// --memory-limit: the 256 MiB over it that peak RSS stays within under
// default settings, less outsideRuntime.
const heapOverBuffers = 256<<20 - outsideRuntime

// outsideRuntime is what peak RSS holds over the runtime's limit: the
// binary's pages (about 30 MiB), the cache index's mapped pages (released
// as they are read, up to about 25 MiB) and the heap's overshoot of the
// limit, which the runtime keeps only softly (up to about 40 MiB with
// 1.28M files read by 8 readers).
const outsideRuntime = 96 << 20

// defaultMetadata is what --metadata-limit 0 (no bound) is taken as.
const defaultMetadata = 256 << 20

// limitHeap tells the Go runtime the memory budget: --memory-limit for
// read buffers and heapOverBuffers besides, or --metadata-limit less
// outsideRuntime if that is more (a metadata limit raised past its default
// raises the runtime's by as much). The metadata, the cache's entries and
// the overhead share what is over --memory-limit with the buffers' unused
// part: metadata fills up on trees of millions of names, whose small
// files hold few buffers. readahead accounts every buffer against
// --memory-limit, but without a runtime limit the GC lets the heap grow
// to twice what is live, and pooled buffers waiting for reuse are not
// accounted at all: a 128 MiB budget peaked at 245 MiB RSS in the soak
// test. GOMEMLIMIT, if set, wins.
//
// The function returned (nil when there is no limit to keep) is
// readahead's Config.OffHeap: buffers mapped outside the Go heap lower
// the runtime's limit, ours or GOMEMLIMIT's, by as much (down to
// heapOverhead at most), so that the heap and they stay within it
// together.
func limitHeap(memoryLimit, metadataLimit int64, logger *slog.Logger) func(offHeap int64) {
	if metadataLimit == 0 {
		metadataLimit = defaultMetadata
	}
	var base int64
	switch {
	case os.Getenv("GOMEMLIMIT") != "":
		base = debug.SetMemoryLimit(-1) // reads it
	case memoryLimit > 0:
		base = memoryLimit + max(heapOverBuffers, metadataLimit-outsideRuntime)
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
