package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jacobsa/fuse"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"ferry/bucket"
	"ferry/bucket/connect"
	"ferry/bucket/retry"
	"ferry/filecache"
	"ferry/flags"
	"ferry/fs"
	"ferry/readahead"
)

// The stack main wires together, checked at compile time.
var (
	_ readahead.BlockCache = (*filecache.Store)(nil)
	_ fs.ContentReader     = (*readahead.Handle)(nil)
	_ bucket.Bucket        = (*connect.Stack)(nil)
)

// mountCommand runs a mount: checks, then foreground, background parent
// or background child.
func mountCommand(ctx context.Context, inv *invocation, cfg *flags.Config) error {
	if child, ok := daemonChild(); ok {
		return serveChild(cfg, child)
	}
	if err := checkMountPoint(cfg.MountPoint, cfg.NonEmpty, !inv.fake); err != nil {
		return usageError{err}
	}
	if inv.fake {
		return nil // mount -f: everything checked, nothing mounted
	}
	if cfg.Foreground {
		logger, closer, err := newLogger(cfg, false, inv.stderr)
		if err != nil {
			return usageError{err}
		}
		defer closer.Close()
		return serve(cfg, logger, func() {
			logger.Info("mounted", "source", cfg.Source, "mountpoint", cfg.MountPoint)
		})
	}

	var childStderr *os.File
	if cfg.LogFile != "" {
		f, err := openLogFile(cfg.LogFile) // fail here, in the caller's terminal
		if err != nil {
			return usageError{err}
		}
		defer f.Close()
		childStderr = f
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return startBackground(ctx, backgroundRequest{
		Exe:        "/proc/self/exe",
		Args:       inv.args,
		MountPoint: cfg.MountPoint,
		Stderr:     childStderr,
		Timeout:    readyTimeout,
	})
}

// serveChild is the background child: it reports the mount's outcome to
// the parent, then serves until unmounted.
func serveChild(cfg *flags.Config, pipe *readyPipe) error {
	signal.Ignore(syscall.SIGHUP) // no terminal to hang up
	logger, closer, err := newLogger(cfg, true, nil)
	if err != nil {
		pipe.report(err)
		return err
	}
	defer closer.Close()
	if err := checkMountPoint(cfg.MountPoint, cfg.NonEmpty, true); err != nil {
		pipe.report(err)
		return err
	}
	err = serve(cfg, logger, func() {
		logger.Info("mounted", "source", cfg.Source, "mountpoint", cfg.MountPoint)
		// Started in the caller's directory (see startBackground); every
		// path has been used by now.
		if err := os.Chdir("/"); err != nil {
			logger.Warn("cannot leave the starting directory", "err", err)
		}
		pipe.report(nil)
	})
	pipe.report(err) // no-op once ready was reported
	if err != nil {
		logger.Error("exiting", "err", err)
	}
	return err
}

// checkMountPoint gives a clear error before anything is started. With
// repair, a dead ferry mount on dir is detached first (repairDeadMount);
// without nonEmpty, a directory with entries is refused.
func checkMountPoint(dir string, nonEmpty, repair bool) error {
	var (
		fi  os.FileInfo
		err error
	)
	if repair {
		fi, err = repairDeadMount(dir)
	} else {
		fi, err = os.Stat(dir)
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("mount point %s does not exist", dir)
	case errors.Is(err, syscall.ENOTCONN):
		return fmt.Errorf("mount point %s is a dead FUSE mount; run fusermount3 -u %s first", dir, dir)
	case err != nil:
		return fmt.Errorf("mount point: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("mount point %s is not a directory", dir)
	}
	// Stacking a second ferry on the same directory (mount -a twice) only
	// hides the first, and unmounting would then hit the wrong one.
	t, _ := mountType(dir)
	if t == "fuse.ferry" {
		return fmt.Errorf("%s is already a ferry mount; unmount it first (fusermount3 -u %s)", dir, dir)
	}
	// An automount trigger (fstab x-systemd.automount): opening it to look
	// for entries would wait for the very mount we are making. An autofs
	// mount point has no entries of its own to hide.
	if !nonEmpty && t != "autofs" {
		return checkEmpty(dir)
	}
	return nil
}

// serve builds the stack, mounts, calls ready once the mount is live, and
// serves until SIGINT/SIGTERM (in the foreground also SIGHUP; then it
// unmounts) or an external unmount.
// An error before ready leaves nothing mounted.
func serve(cfg *flags.Config, logger *slog.Logger, ready func()) (err error) {
	// SIGINT/SIGTERM are caught from the start so that a signal during
	// setup stops setup instead of killing us half-mounted.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	if cfg.Foreground && !signal.Ignored(syscall.SIGHUP) {
		// The terminal went away (an ssh session closed): unmount as for
		// SIGTERM rather than die and leave a dead mount behind. Not when
		// SIGHUP is ignored (nohup, or the background child): Notify
		// would undo that.
		signal.Notify(sigs, syscall.SIGHUP)
	}
	defer signal.Stop(sigs)
	setupCtx, cancelSetup := context.WithCancel(context.Background())
	defer cancelSetup()
	setupDone := make(chan struct{})
	watcherDone := make(chan struct{})
	go func() {
		defer close(watcherDone)
		select {
		case <-sigs:
			cancelSetup()
		case <-setupDone:
		}
	}()
	defer func() {
		// Stop the setup watcher on every path, so that it never takes a
		// signal meant for the serving loop below.
		select {
		case <-setupDone:
		default:
			close(setupDone)
		}
		<-watcherDone
	}()

	offHeap := limitHeap(cfg.MemoryLimit, logger)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Listen before mounting so a busy port is a startup error.
	var metricsSrv *http.Server
	if cfg.MetricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return &flags.OptionError{Option: "metrics-addr", Err: err}
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		switch {
		case cfg.Debug && loopback(ln.Addr()):
			// Profiles answer "where does the CPU go" on a live mount;
			// only with --debug, and only on loopback, since they expose
			// internals (and cost CPU) to whoever can connect.
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		case cfg.Debug:
			logger.Warn("--debug: profiles (/debug/pprof) are served only on a loopback --metrics-addr", "addr", ln.Addr().String())
		}
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go metricsSrv.Serve(ln)
		defer metricsSrv.Close()
	}

	storeConns, storeTimeout := cfg.MaxConnections, cfg.StoreTimeout
	if strings.HasPrefix(cfg.Source, "file:") {
		// connect refuses network options for local directories
		storeConns, storeTimeout = 0, 0
	}
	b, err := connect.Open(setupCtx, cfg.Source, connect.Options{
		Endpoint:       cfg.Endpoint,
		Anonymous:      cfg.Anonymous,
		Region:         cfg.Region,
		S3PathStyle:    cfg.S3PathStyle,
		KeyFile:        cfg.KeyFile,
		BillingProject: cfg.BillingProject,
		MaxConnections: storeConns,
		Timeout:        storeTimeout,
		// A body that trickles under 64 KiB per --store-timeout (at least
		// 30 s: a floor per connection, and 32 share a slow link) is as
		// stuck as a silent one.
		Retry:      retry.Config{MaxElapsed: cfg.RetryMaxTime, SlowWindow: slowWindow(storeTimeout)},
		Registerer: reg,
		Logger:     logger,
	})
	if err != nil {
		return err // names the URL already
	}
	defer b.Close()
	// A missing bucket or bad credentials fail the mount now, in the
	// caller's terminal, rather than as EIO on the first ls.
	if err := connect.Probe(setupCtx, b); err != nil {
		return fmt.Errorf("%s: %w", cfg.Source, err)
	}

	var (
		cache     readahead.BlockCache
		fileStore *filecache.Store // the same, for warm --check and invalidate --data; nil without a disk cache
	)
	blockSize := int64(0) // readahead's own default without a disk cache
	if cfg.CacheDir != "" {
		store, err := openCache(cfg, logger, reg)
		switch {
		case err != nil && cacheDiskFailed(err):
			// A cache volume gone read-only or full must not stop the
			// mount (a restart would never come back): serve from the
			// store, and say so once.
			logger.Error("disk cache unavailable; reading from the store only", "cache_dir", cfg.CacheDir, "err", err)
			reg.MustRegister(cacheDisabledGauge())
		case err != nil:
			return &flags.OptionError{Option: "cache-dir", Err: err}
		default:
			defer store.Close()
			cache = store
			fileStore = store
		}
	}

	fetcher, err := readahead.New(readahead.Config{
		Bucket:         b,
		Cache:          cache,
		MemoryLimit:    cfg.MemoryLimit,
		MaxConnections: cfg.MaxConnections,
		BlockSize:      blockSize,
		Logger:         logger,
		Registerer:     reg,
		OffHeap:        offHeap,
	})
	if err != nil {
		return err
	}
	defer fetcher.Close()

	if setupCtx.Err() != nil {
		return errors.New("interrupted before mounting")
	}
	// The file system serves until unmounted; it must not inherit the
	// signal-cancelled setup context.
	serveCtx, cancelServe := context.WithCancel(context.Background())
	defer cancelServe()
	// The control socket (control.go) listens before mounting, so
	// clients can reach it as soon as the mount is visible.
	ctl, err := startControl(cfg, logger, fileStore)
	if err != nil {
		return err
	}
	defer ctl.Close()
	var openAhead func(obj bucket.Object) fs.ContentReader
	if cfg.ReadAheadFiles {
		openAhead = func(obj bucket.Object) fs.ContentReader { return fetcher.OpenAhead(obj) }
	}
	var backing func(obj bucket.Object) (fs.BackingFile, bool)
	var unready func(obj bucket.Object, limit int64) []bucket.ByteRange
	if fileStore != nil && cfg.CachePassthrough {
		unready = func(obj bucket.Object, limit int64) []bucket.ByteRange {
			return fileStore.Unready(cacheKey(obj), limit)
		}
		backing = func(obj bucket.Object) (fs.BackingFile, bool) {
			if w, ok := fileStore.Whole(cacheKey(obj)); ok {
				return w, true
			}
			return nil, false
		}
	}
	mfs, err := fs.Mount(serveCtx, cfg.MountPoint, fs.Config{
		Bucket:    b,
		Open:      func(obj bucket.Object) fs.ContentReader { return fetcher.Open(obj) },
		OpenAhead: openAhead,
		// A quarter of the readahead memory at most: small files waiting
		// for readers must not push one another out of the budget.
		AheadBytes:  cfg.MemoryLimit / 4,
		Cached:      fetcher.Cached,
		MetadataTTL: cfg.MetadataTTL,
		NegativeTTL: cfg.NegativeTTL,
		Uid:         cfg.Uid,
		Gid:         cfg.Gid,
		FileMode:    cfg.FileMode,
		DirMode:     cfg.DirMode,
		Logger:      logger,
		Registerer:  reg,

		// Operations: warm --check and invalidate (control.go).
		CachedBytes: cachedBytesOf(fileStore),
		Backing:     backing,
		Unready:     unready,
		Splice:      fileStore != nil && cfg.CachePassthrough,
		Control:     ctl.fs,
	}, fs.MountOptions{
		AllowOther:    cfg.AllowOther,
		ReadAheadKB:   cfg.ReadAheadKB,
		MaxBackground: cfg.MaxBackground,
		FSName:        cfg.Source,
		Debug:         cfg.Debug,
		KernelOptions: cfg.KernelOptions,
	})
	if err != nil {
		return fmt.Errorf("mounting %s: %w", cfg.MountPoint, err)
	}
	ctl.mounted(cfg.MountPoint)
	// Setup is over: from here a signal means "unmount", handled below.
	close(setupDone)
	<-watcherDone
	if setupCtx.Err() != nil {
		// The signal came while fs.Mount ran: undo the mount, report.
		if err := unmountRetry(cfg.MountPoint, 5, time.Second); err != nil {
			return fmt.Errorf("interrupted while mounting, and cannot unmount %s: %w", cfg.MountPoint, err)
		}
		_ = mfs.Join(context.Background())
		return errors.New("interrupted while mounting")
	}
	ready()
	dev := mountDev(cfg.MountPoint) // to tell our mount from what is there later

	joined := make(chan error, 1)
	go func() { joined <- mfs.Join(context.Background()) }()
	for {
		select {
		case err := <-joined:
			// Unmounted from outside (umount, fusermount -u).
			logger.Info("unmounted", "mountpoint", cfg.MountPoint)
			return err
		case sig := <-sigs:
			if dev != "" && !slices.ContainsFunc(readMounts(), func(m mountEntry) bool {
				return m.point == cfg.MountPoint && m.dev == dev
			}) {
				// Detached from outside already (a Kubernetes preStop's
				// fusermount3 -uz, umount -l) while files are open:
				// nothing to unmount; serve them until they are closed.
				// (Covered by another mount, it is still ours to unmount.)
				logger.Info("already detached from the mount point; serving the open files until they are closed",
					"signal", sig.String(), "mountpoint", cfg.MountPoint)
				err := <-joined
				logger.Info("unmounted", "mountpoint", cfg.MountPoint)
				return err
			}
			logger.Info("unmounting", "signal", sig.String(), "mountpoint", cfg.MountPoint)
			if err := unmountRetry(cfg.MountPoint, 5, time.Second); err != nil {
				// Still busy: detach lazily. The mount point is free at
				// once (a restarted ferry can mount there) and the open
				// files are still served; when the last one is closed
				// the kernel ends the connection and Join returns.
				if derr := detachMount(cfg.MountPoint); derr != nil {
					logger.Error("cannot unmount; still serving (close open files, or run fusermount3 -uz to detach)",
						"mountpoint", cfg.MountPoint, "err", err, "detach_err", derr)
					continue
				}
				logger.Warn("mount point busy: detached it; serving the open files until they are closed",
					"mountpoint", cfg.MountPoint, "err", err)
			}
			err := <-joined
			logger.Info("unmounted", "mountpoint", cfg.MountPoint)
			return err
		}
	}
}

// unmountRetry unmounts dir, retrying while it fails (typically EBUSY).
func unmountRetry(dir string, attempts int, wait time.Duration) error {
	var err error
	for i := 0; i < attempts; i++ {
		if err = fuse.Unmount(dir); err == nil {
			return nil
		}
		time.Sleep(wait)
	}
	return err
}

// bucketID names the store for the disk cache's keys: the endpoint and
// the full source (with prefix), since object names are relative to it.
func bucketID(cfg *flags.Config) string {
	return cfg.Endpoint + "|" + cfg.Source
}

// cacheKey is obj's version as the disk cache names it.
func cacheKey(obj bucket.Object) filecache.Key {
	return filecache.Key{Name: obj.Name, Version: obj.Version, Size: obj.Size}
}

// openCache creates (if need be) and opens the disk cache. A new cache
// directory on a read-only or full volume fails like an existing one
// there: cacheDiskFailed tells, and the mount goes on without it.
func openCache(cfg *flags.Config, logger *slog.Logger, reg prometheus.Registerer) (*filecache.Store, error) {
	if err := os.MkdirAll(cfg.CacheDir, 0o700); err != nil {
		return nil, err
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(cfg.CacheDir, &st); err != nil {
		return nil, err
	}
	maxSize, minFree := cfg.CacheBudget(st.Blocks * uint64(st.Bsize))
	return filecache.Open(filecache.Config{
		Dir:        cfg.CacheDir,
		MaxSize:    maxSize,
		MinFree:    minFree,
		BlockSize:  cfg.CacheBlockSize,
		BucketID:   bucketID(cfg),
		Logger:     logger,
		Registerer: reg,
		// Blocks checked once in the mount may be spliced from their
		// file (filecache/splice.go), under the same trust as
		// passthrough.
		Splice: cfg.CachePassthrough,
	})
}

// slowWindow is the retry reader's SlowWindow for a --store-timeout: off
// without one (local directories), else at least 30 s.
func slowWindow(storeTimeout time.Duration) time.Duration {
	if storeTimeout <= 0 {
		return 0
	}
	return max(storeTimeout, 30*time.Second)
}

// loopback reports whether a listener's address is reachable only from
// this machine.
func loopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}
