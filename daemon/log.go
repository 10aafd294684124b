package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"log/syslog"
	"os"

	"ferry/flags"
)

// newLogger builds the process logger. Where logs go:
//   - --log-file: appended to that file, foreground or background;
//   - foreground without it: stderr;
//   - background without it: syslog (daemon facility, tag "ferry") when a
//     syslog socket exists, otherwise nowhere: a detached process has no
//     terminal, and containers often have no syslog. Use --log-file there.
//
// The returned closer closes the destination (a no-op for stderr).
func newLogger(cfg *flags.Config, background bool, stderr io.Writer) (*slog.Logger, io.Closer, error) {
	var (
		w         io.Writer = stderr
		closer    io.Closer = nopCloser{}
		replace   func([]string, slog.Attr) slog.Attr
		debugging = cfg.Debug
	)
	switch {
	case cfg.LogFile != "":
		f, err := openLogFile(cfg.LogFile)
		if err != nil {
			return nil, nil, err
		}
		w, closer = f, f
	case background:
		sw, err := syslog.New(syslog.LOG_INFO|syslog.LOG_DAEMON, "ferry")
		if err != nil {
			w = io.Discard
			break
		}
		w, closer = sw, sw
		// syslog stamps its own time.
		replace = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
	}
	level := slog.LevelInfo
	if debugging {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: replace}
	var h slog.Handler
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(h), closer, nil
}

// openLogFile opens the log file for appending, creating it 0644.
func openLogFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, &flags.OptionError{Option: "log-file", Err: fmt.Errorf("%w", err)}
	}
	return f, nil
}

// nopCloser is the closer of destinations we do not own (stderr).
type nopCloser struct{}

func (nopCloser) Close() error { return nil }
