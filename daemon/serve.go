package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"ferry/flags"
	"ferry/mountinfo"
)

// Serve mounts in this process: it has mount build and mount the file
// system, calls ready once the mount is live, and serves until
// SIGINT/SIGTERM (or the hang-up of its terminal, see sighup) or an
// external unmount. An error before ready leaves nothing mounted.
func Serve(cfg *flags.Config, logger *slog.Logger, mount Mounter, ready func()) error {
	return serveLogged(cfg, logger, nil, mount, ready)
}

// serveLogged is Serve with the log output that SIGHUP reopens.
func serveLogged(cfg *flags.Config, logger *slog.Logger, out *logOutput, mount Mounter, ready func()) error {
	u := systemUnmounter(cfg.MountPoint, logger)
	u.hup = newSighup(cfg.Foreground, out, logger)
	_, u.external = flags.FuseFD(cfg.MountPoint)
	return serve(cfg, logger, mount, ready, u)
}

// serve is Serve with the unmounting done by u.
func serve(cfg *flags.Config, logger *slog.Logger, mount Mounter, ready func(), u *unmounter) error {
	// SIGINT/SIGTERM are caught from the start so that a signal during
	// setup stops setup instead of killing us half-mounted.
	sigs := notifySignals()
	defer signal.Stop(sigs)
	setup := watchSetup(sigs, u.stops)
	defer setup.stop()

	reg, labelled := newRegistry(cfg)
	stopMetrics, err := serveMetrics(cfg, reg, logger)
	if err != nil {
		return err
	}
	defer stopMetrics()
	s := &Setup{Logger: logger, Registry: labelled, Gatherer: reg, Labels: mountLabels(cfg)}
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

// notifySignals returns the channel of the signals that stop a mount, and
// of SIGHUP (sighup says what it means).
func notifySignals() chan os.Signal {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	return sigs
}

// sighup says what a SIGHUP means. A foreground ferry whose controlling
// terminal went away (an ssh session closed: the kernel hangs up the
// terminal, takes it from the session and signals it) unmounts, as for
// SIGTERM, rather than die and leave a dead mount behind. Any other
// SIGHUP (kill -HUP, logrotate's postrotate) only reopens --log-file:
// always in the background, which has no terminal, under nohup, and in
// a foreground ferry whose terminal is still there.
type sighup struct {
	log *slog.Logger
	out *logOutput // nil: nothing to reopen
	// hangup: SIGHUP was not ignored at start and the process had a
	// controlling terminal; ttyGone then tells a hang-up from a request.
	hangup  bool
	ttyGone func() bool
}

func newSighup(foreground bool, out *logOutput, logger *slog.Logger) *sighup {
	h := &sighup{log: logger, out: out, ttyGone: func() bool { return !hasTTY() }}
	h.hangup = foreground && !signal.Ignored(syscall.SIGHUP) && hasTTY()
	return h
}

// hasTTY reports whether the process has a controlling terminal (one
// that has not been hung up).
func hasTTY() bool {
	f, err := os.OpenFile("/dev/tty", os.O_RDONLY|syscall.O_NOCTTY, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// stops reports whether sig ends the mount; a SIGHUP that does not is
// handled here.
func (h *sighup) stops(sig os.Signal) bool {
	if sig != syscall.SIGHUP {
		return true
	}
	if h.hangup && h.ttyGone() {
		h.log.Info("the terminal hung up")
		return true
	}
	if h.out == nil || h.out.path == "" {
		h.log.Info("SIGHUP: no log file to reopen")
		return false
	}
	if err := h.out.Reopen(); err != nil {
		h.log.Error("SIGHUP: cannot reopen the log file; still writing to the old one", "err", err)
		return false
	}
	h.log.Info("SIGHUP: reopened the log file", "path", h.out.path)
	return false
}

// setupWatch cancels ctx when a signal comes before end is called.
type setupWatch struct {
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{} // closed by end
	stopped chan struct{} // closed when the watcher has returned
	once    sync.Once
}

func watchSetup(sigs <-chan os.Signal, stops func(os.Signal) bool) *setupWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &setupWatch{ctx: ctx, cancel: cancel, done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(w.stopped)
		for {
			select {
			case sig := <-sigs:
				if stops(sig) {
					cancel()
					return
				}
			case <-w.done:
				return
			}
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
	// abort ends the FUSE connection of the mount of device dev, whose
	// open files then fail (ENOTCONN): what a detached mount comes to
	// after a second signal or detachGrace.
	abort func(dev string) error
	grace time.Duration
	// hup says what a SIGHUP means; nil: it stops, as any signal.
	hup *sighup
	// external: the mount is a helper's (/dev/fd/N), which unmounts it;
	// a signal only ends the connection.
	external bool
}

// detachGrace is how long a mount detached with files still open is
// served before the connection is ended (a second SIGINT/SIGTERM ends it
// at once): a reader that keeps a file open must not keep a stopped
// ferry alive for ever.
const detachGrace = time.Minute

// stops reports whether sig ends the mount (sighup.stops).
func (u *unmounter) stops(sig os.Signal) bool {
	return u.hup == nil || u.hup.stops(sig)
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
		abort:   abortConnection,
		grace:   detachGrace,
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
			if !u.stops(sig) {
				continue
			}
			if u.external {
				// Exiting closes /dev/fuse, which ends the connection; the
				// helper that mounted it unmounts it.
				u.log.Info("stopping; the helper that mounted /dev/fuse unmounts it", "signal", sig.String(), "mountpoint", u.dir)
				return nil
			}
			if dev != "" && !u.mounted(dev) {
				// Detached from outside already (a Kubernetes preStop's
				// fusermount3 -uz, umount -l) while files are open:
				// nothing to unmount; serve them until they are closed.
				// (Covered by another mount, it is still ours to unmount.)
				u.log.Info("already detached from the mount point; serving the open files until they are closed",
					"signal", sig.String(), "mountpoint", u.dir)
				return u.drain(dev, joined, sigs)
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
				return u.drain(dev, joined, sigs)
			}
			err := <-joined
			u.log.Info("unmounted", "mountpoint", u.dir)
			return err
		}
	}
}

// drain serves a mount detached with files open until they are closed, a
// second SIGINT/SIGTERM, or u.grace; then it ends the connection.
func (u *unmounter) drain(dev string, joined <-chan error, sigs <-chan os.Signal) error {
	timer := time.NewTimer(u.grace)
	defer timer.Stop()
	for {
		select {
		case err := <-joined:
			u.log.Info("unmounted", "mountpoint", u.dir)
			return err
		case sig := <-sigs:
			if !u.stops(sig) {
				continue
			}
			u.log.Warn("second signal: ending the connection; files still open on the detached mount fail from now on",
				"signal", sig.String(), "mountpoint", u.dir)
		case <-timer.C:
			u.log.Warn("files still open on the detached mount after the grace period: ending the connection; they fail from now on",
				"grace", u.grace, "mountpoint", u.dir)
		}
		if err := u.abort(dev); err != nil {
			// Exiting ends it all the same, when /dev/fuse is closed
			// (fusectl is often not mounted, in containers).
			u.log.Info("exiting ends the FUSE connection", "abort_err", err)
			return nil
		}
		select {
		case <-joined:
		case <-time.After(5 * time.Second):
		}
		u.log.Info("unmounted", "mountpoint", u.dir)
		return nil
	}
}

// abortConnection ends the FUSE connection of the mount of device dev
// ("0:52") through the fusectl file system, as `echo 1 >
// /sys/fs/fuse/connections/52/abort` does.
func abortConnection(dev string) error {
	_, minor, ok := strings.Cut(dev, ":")
	if !ok {
		return fmt.Errorf("no FUSE connection known for device %q", dev)
	}
	return os.WriteFile(filepath.Join("/sys/fs/fuse/connections", minor, "abort"), []byte("1"), 0)
}
