// Package daemon runs one mount as a process: it checks the mount point
// (repairing a dead ferry mount there), starts in the background with a
// readiness pipe or stays in the foreground, sets up logging and the
// metrics server, has main build and mount the file system, and serves
// until a signal or an external unmount, then unmounts. It also speaks
// mount(8)'s helper convention (mount.ferry, install-helper, exit
// statuses).
//
// It must never leave a mount behind when it fails, and never hang the
// caller of mount(8): every error before the mount is live leaves nothing
// mounted, and the parent of a background mount waits a bounded time.
// What is mounted is main's business (a Mounter): daemon does not know the
// file system, the cache or the store.
package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"ferry/flags"
)

// A Mounter builds the file system cfg describes and mounts it on
// cfg.MountPoint. ctx is cancelled by SIGINT or SIGTERM while it runs: it then
// stops, mounts nothing, and returns an error. What it registers with
// s.Cleanup runs when the mount has ended, or when it fails.
type Mounter func(ctx context.Context, cfg *flags.Config, s *Setup) (Mounted, error)

// Mounted is a live mount (a *fuse.MountedFileSystem).
type Mounted interface {
	// Join waits until the file system is unmounted and has stopped
	// serving.
	Join(ctx context.Context) error
}

// Setup is what a Mounter is given besides its context.
type Setup struct {
	// Logger is the process's logger (log.go).
	Logger *slog.Logger
	// Registry collects the mount's metrics, which --metrics-addr serves,
	// each series labelled with the mount (mountLabels).
	Registry prometheus.Registerer
	// Gatherer reads them back (ferry stats, over the control socket);
	// Labels are those every series carries.
	Gatherer prometheus.Gatherer
	Labels   prometheus.Labels

	cleanups []func()
}

// Cleanup registers f to run once the mount has ended or failed, after
// the functions registered later (as testing.T.Cleanup does).
func (s *Setup) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

// runCleanups runs the registered functions, last first.
func (s *Setup) runCleanups() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cleanups = nil
}

// Command is one run of the mount command.
type Command struct {
	Config *flags.Config
	// Args are ferry's arguments (after mount.ferry's translation): the
	// background child is started with exactly these.
	Args []string
	// Fake is mount(8)'s -f: check everything, mount nothing.
	Fake bool
	// Stderr is the caller's: the foreground logs there without
	// --log-file.
	Stderr io.Writer
	// Mount builds and mounts the file system.
	Mount Mounter
	// ExitCode is the exit status an error stands for (main's
	// classification); the background child sends it to its parent.
	ExitCode func(error) int
}

// Run runs a mount: checks, then the foreground, the background parent
// or the background child (this process, started by a parent).
func Run(ctx context.Context, cmd Command) error {
	cfg := cmd.Config
	if pipe, ok := backgroundChild(cmd.ExitCode); ok {
		return serveChild(cfg, cmd.Mount, pipe)
	}
	if err := checkMountPoint(cfg.MountPoint, cfg.NonEmpty, !cmd.Fake); err != nil {
		return UsageError{err}
	}
	if cmd.Fake {
		return nil // mount -f: everything checked, nothing mounted
	}
	if cfg.Foreground {
		logger, out, err := newLogger(cfg, false, cmd.Stderr)
		if err != nil {
			return UsageError{err}
		}
		defer out.Close()
		return serveLogged(cfg, logger, out, cmd.Mount, func() {
			logger.Info("mounted", "source", cfg.Source, "mountpoint", cfg.MountPoint)
		})
	}

	childStderr, defaulted, err := backgroundLog(cfg)
	if err != nil {
		return UsageError{err} // here, in the caller's terminal
	}
	if childStderr != nil {
		defer childStderr.Close()
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err = startBackground(ctx, backgroundRequest{
		Exe:        "/proc/self/exe",
		Args:       cmd.Args,
		MountPoint: cfg.MountPoint,
		Stderr:     childStderr,
		Timeout:    readyTimeout,
	})
	if err == nil && defaulted {
		// Said once the mount is live, so that an error stays one line.
		fmt.Fprintf(cmd.Stderr, "ferry: warning: no syslog socket: this mount logs to %s (set --log-file to choose)\n", childStderr.Name())
	}
	return err
}
