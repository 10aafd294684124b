package daemon

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"log/syslog"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"ferry/flags"
)

// newLogger builds the process logger. Where logs go:
//   - --log-file: appended to that file, foreground or background;
//   - foreground without it: stderr;
//   - background without it: syslog (daemon facility, tag "ferry") when a
//     syslog socket exists, otherwise the default file (defaultLogFile),
//     with a warning: a detached process has no terminal, and containers
//     often have no syslog, but its logs must go somewhere.
//
// In the background, the log file is also the process's stderr (fd 2), so
// that a crash is recorded. The level is --log-level, or debug with
// --debug. The returned logOutput reopens the file (SIGHUP) and closes
// it.
func newLogger(cfg *flags.Config, background bool, stderr io.Writer) (*slog.Logger, *logOutput, error) {
	out := &logOutput{w: stderr}
	var (
		replace  func([]string, slog.Attr) slog.Attr
		fallback string // the default file, when syslog is missing
	)
	path := cfg.LogFile
	if path == "" && background {
		sw, err := dialSyslog()
		if err == nil {
			out.w, out.closer = sw, sw
			// syslog stamps its own time.
			replace = func(groups []string, a slog.Attr) slog.Attr {
				if len(groups) == 0 && a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}
		} else {
			path, fallback = defaultLogFile(), err.Error()
		}
	}
	if path != "" {
		out.path, out.stderrToo = path, background
		err := out.open()
		if err != nil && fallback != "" {
			err = defaultLogError(path, err)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	opts := &slog.HandlerOptions{Level: logLevel(cfg), ReplaceAttr: replace}
	var h slog.Handler
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(out, opts)
	} else {
		h = slog.NewTextHandler(out, opts)
	}
	logger := slog.New(h)
	if fallback != "" {
		logger.Warn("no syslog socket: logging to the default file (set --log-file to choose)", "path", path, "err", fallback)
	}
	return logger, out, nil
}

// backgroundLog opens, in the parent of a background mount, the file its
// child will log to, which also takes the child's stderr: --log-file, or
// the default file when there is no syslog socket (defaulted). Nil with
// syslog. Errors come here, in the caller's terminal.
func backgroundLog(cfg *flags.Config) (f *os.File, defaulted bool, err error) {
	path := cfg.LogFile
	if path == "" {
		if syslogAvailable() {
			return nil, false, nil
		}
		path, defaulted = defaultLogFile(), true
	}
	f, err = openLogFile(path)
	if err != nil && defaulted {
		err = defaultLogError(path, err)
	}
	return f, defaulted, err
}

// defaultLogError says why the default log file could not be used.
func defaultLogError(path string, err error) error {
	var oe *flags.OptionError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return fmt.Errorf("no syslog socket, and the default log file %s cannot be written: %w; give --log-file", path, err)
}

// logLevel is the slog level of --log-level and --debug.
func logLevel(cfg *flags.Config) slog.Level {
	if cfg.Debug {
		return slog.LevelDebug
	}
	switch cfg.LogLevel {
	case "error":
		return slog.LevelError
	case "warn":
		return slog.LevelWarn
	case "debug":
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// dialSyslog connects to the local syslog socket; tests replace it.
var dialSyslog = func() (io.WriteCloser, error) {
	return syslog.New(syslog.LOG_INFO|syslog.LOG_DAEMON, "ferry")
}

// syslogAvailable reports whether a background mount without --log-file
// would log to syslog.
func syslogAvailable() bool {
	w, err := dialSyslog()
	if err != nil {
		return false
	}
	w.Close()
	return true
}

// defaultLogFile is where a background mount logs without --log-file and
// without syslog: /var/log/ferry.log for root, else the user's state
// directory ($XDG_STATE_HOME/ferry/ferry.log, ~/.local/state/ferry/ferry.log).
// Tests replace it.
var defaultLogFile = func() string {
	if os.Geteuid() == 0 {
		return "/var/log/ferry.log"
	}
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "ferry", "ferry.log")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), fmt.Sprintf("ferry-%d.log", os.Geteuid()))
	}
	return filepath.Join(home, ".local", "state", "ferry", "ferry.log")
}

// logOutput is where log records are written: stderr, syslog or a file
// that SIGHUP reopens (logrotate renames the file, then sends SIGHUP).
type logOutput struct {
	// Constant data
	path      string // the log file; "" for stderr or syslog
	stderrToo bool   // fd 2 follows the file (the background child)

	mu     sync.Mutex
	w      io.Writer // GUARDED_BY(mu)
	closer io.Closer // GUARDED_BY(mu); nil for stderr
}

func (o *logOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.w.Write(p)
}

// Reopen opens the log file anew, at its path, and closes the old one;
// a no-op without a log file.
func (o *logOutput) Reopen() error {
	if o.path == "" {
		return nil
	}
	return o.open()
}

// open (re)opens the log file.
func (o *logOutput) open() error {
	f, err := openLogFile(o.path)
	if err != nil {
		return err
	}
	if o.stderrToo {
		// A panic's trace goes to fd 2: into the current file too.
		_ = unix.Dup3(int(f.Fd()), 2, 0)
	}
	o.mu.Lock()
	old := o.closer
	o.w, o.closer = f, f
	o.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// Close closes the destination (not stderr).
func (o *logOutput) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closer == nil {
		return nil
	}
	err := o.closer.Close()
	o.closer, o.w = nil, io.Discard
	return err
}

// openLogFile opens the log file for appending, creating it 0600: it
// holds object names, and with --debug every operation.
func openLogFile(path string) (*os.File, error) {
	if path == defaultLogFile() {
		_ = os.MkdirAll(filepath.Dir(path), 0o700) // ours to make
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, &flags.OptionError{Option: "log-file", Err: fmt.Errorf("%w", err)}
	}
	return f, nil
}
