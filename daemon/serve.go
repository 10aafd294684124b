package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"ferry/flags"
	"ferry/mountinfo"
)

// Serve mounts in this process: it has mount build and mount the file
// system, calls ready once the mount is live, and serves until
// SIGINT/SIGTERM (in the foreground also SIGHUP; then it unmounts) or an
// external unmount. An error before ready leaves nothing mounted.
func Serve(cfg *flags.Config, logger *slog.Logger, mount Mounter, ready func()) error {
	return serve(cfg, logger, mount, ready, systemUnmounter(cfg.MountPoint, logger))
}

// serve is Serve with the unmounting done by u.
func serve(cfg *flags.Config, logger *slog.Logger, mount Mounter, ready func(), u *unmounter) error {
	// SIGINT/SIGTERM are caught from the start so that a signal during
	// setup stops setup instead of killing us half-mounted.
	sigs := notifySignals(cfg.Foreground)
	defer signal.Stop(sigs)
	setup := watchSetup(sigs)
	defer setup.stop()

	reg := newRegistry()
	stopMetrics, err := serveMetrics(cfg, reg, logger)
	if err != nil {
		return err
	}
	defer stopMetrics()
	s := &Setup{Logger: logger, Registry: reg}
	defer s.runCleanups()

	m, err := mount(setup.ctx, cfg, s)
	if err != nil {
		return err
	}
	// Setup is over: from here a signal means "unmount", handled below.
	if setup.end() {
		// The signal came while mount ran: undo the mount, report.
		if err := u.unmount(); err != nil {
			return fmt.Errorf("interrupted while mounting, and cannot unmount %s: %w", cfg.MountPoint, err)
		}
		_ = m.Join(context.Background())
		return errors.New("interrupted while mounting")
	}
	ready()
	dev := u.topDevice() // to tell our mount from what is there later

	joined := make(chan error, 1)
	go func() { joined <- m.Join(context.Background()) }()
	return u.wait(dev, joined, sigs)
}

// notifySignals returns the channel of the signals that stop a mount.
func notifySignals(foreground bool) chan os.Signal {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	if foreground && !signal.Ignored(syscall.SIGHUP) {
		// The terminal went away (an ssh session closed): unmount as for
		// SIGTERM rather than die and leave a dead mount behind. Not when
		// SIGHUP is ignored (nohup, or the background child): Notify
		// would undo that.
		signal.Notify(sigs, syscall.SIGHUP)
	}
	return sigs
}

// setupWatch cancels ctx when a signal comes before end is called.
type setupWatch struct {
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{} // closed by end
	stopped chan struct{} // closed when the watcher has returned
	once    sync.Once
}

func watchSetup(sigs <-chan os.Signal) *setupWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &setupWatch{ctx: ctx, cancel: cancel, done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(w.stopped)
		select {
		case <-sigs:
			cancel()
		case <-w.done:
		}
	}()
	return w
}

// end stops the watcher, so that it never takes a signal meant for the
// serving loop, and reports whether a signal interrupted setup. ctx is
// not cancelled otherwise: what setup built may go on using it (a store
// client made with it) until stop.
func (w *setupWatch) end() (interrupted bool) {
	w.once.Do(func() { close(w.done) })
	<-w.stopped
	return w.ctx.Err() != nil
}

// stop ends the watch, if setup has not, and cancels ctx.
func (w *setupWatch) stop() {
	w.end()
	w.cancel()
}

// unmounter takes a live mount off its mount point when a signal asks.
// Its effects on the system are functions, so that tests can fake them.
type unmounter struct {
	log *slog.Logger
	dir string
	// topDevice is the device of the topmost mount on dir, "" if none;
	// mounted reports whether a mount of device dev is on dir, on top or
	// covered by another.
	topDevice func() string
	mounted   func(dev string) bool
	// unmount unmounts dir, retrying while it is busy; detach detaches it
	// lazily (umount -l).
	unmount, detach func() error
}

// systemUnmounter is the unmounter of the mount on dir.
func systemUnmounter(dir string, logger *slog.Logger) *unmounter {
	return &unmounter{
		log: logger,
		dir: dir,
		topDevice: func() string {
			m, _ := mountinfo.Top(dir)
			return m.Dev
		},
		mounted: func(dev string) bool {
			return slices.ContainsFunc(mountinfo.Read(), func(m mountinfo.Mount) bool {
				return m.Point == dir && m.Dev == dev
			})
		},
		unmount: func() error { return unmountRetry(dir, 5, time.Second) },
		detach:  func() error { return detachMount(dir) },
	}
}

// wait serves the mount of device dev until it ends: unmounted from
// outside (joined delivers), or unmounted here on a signal. A mount point too busy to
// unmount is detached lazily; one that cannot be detached either keeps
// being served until the next signal.
func (u *unmounter) wait(dev string, joined <-chan error, sigs <-chan os.Signal) error {
	for {
		select {
		case err := <-joined:
			// Unmounted from outside (umount, fusermount -u).
			u.log.Info("unmounted", "mountpoint", u.dir)
			return err
		case sig := <-sigs:
			if dev != "" && !u.mounted(dev) {
				// Detached from outside already (a Kubernetes preStop's
				// fusermount3 -uz, umount -l) while files are open:
				// nothing to unmount; serve them until they are closed.
				// (Covered by another mount, it is still ours to unmount.)
				u.log.Info("already detached from the mount point; serving the open files until they are closed",
					"signal", sig.String(), "mountpoint", u.dir)
				err := <-joined
				u.log.Info("unmounted", "mountpoint", u.dir)
				return err
			}
			u.log.Info("unmounting", "signal", sig.String(), "mountpoint", u.dir)
			if err := u.unmount(); err != nil {
				// Still busy: detach lazily. The mount point is free at
				// once (a restarted ferry can mount there) and the open
				// files are still served; when the last one is closed
				// the kernel ends the connection and Join returns.
				if derr := u.detach(); derr != nil {
					u.log.Error("cannot unmount; still serving (close open files, or run fusermount3 -uz to detach)",
						"mountpoint", u.dir, "err", err, "detach_err", derr)
					continue
				}
				u.log.Warn("mount point busy: detached it; serving the open files until they are closed",
					"mountpoint", u.dir, "err", err)
			}
			err := <-joined
			u.log.Info("unmounted", "mountpoint", u.dir)
			return err
		}
	}
}
