package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"ferry/flags"
)

func TestLoggerToFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ferry.log")
	logger, out, err := newLogger(&flags.Config{LogFile: path, LogFormat: "json", Debug: true}, false, nil)
	require.NoError(t, err)
	logger.Debug("hello", "k", 1)
	require.NoError(t, out.Close())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(data, &rec))
	assert.Equal(t, "hello", rec["msg"])
	assert.Equal(t, "DEBUG", rec["level"])
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "it holds object names")

	_, _, err = newLogger(&flags.Config{LogFile: "/nonexistent/dir/ferry.log"}, false, nil)
	var oe *flags.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "log-file", oe.Option)
	assert.NoDirExists(t, "/nonexistent/dir", "a --log-file directory is not created")
}

// TestLoggerDestinations: the foreground logs to the caller's stderr, as
// text or JSON, at --log-level (debug with --debug).
func TestLoggerDestinations(t *testing.T) {
	var stderr bytes.Buffer
	logger, out, err := newLogger(&flags.Config{LogFormat: "text"}, false, &stderr)
	require.NoError(t, err)
	logger.Debug("hidden")
	logger.Info("mounted", "mountpoint", "/mnt/x")
	require.NoError(t, out.Close())
	assert.Regexp(t, `^time=\S+ level=INFO msg=mounted mountpoint=/mnt/x\n$`, stderr.String())

	stderr.Reset()
	logger, _, err = newLogger(&flags.Config{LogFormat: "json", Debug: true, LogLevel: "error"}, false, &stderr)
	require.NoError(t, err)
	logger.Debug("shown")
	var rec map[string]any
	require.NoError(t, json.Unmarshal(stderr.Bytes(), &rec))
	assert.Equal(t, "shown", rec["msg"], "--debug wins over --log-level")
	assert.Contains(t, rec, "time")

	for level, shown := range map[string][]string{
		"error": {"E"}, "warn": {"W", "E"}, "info": {"I", "W", "E"}, "debug": {"D", "I", "W", "E"},
	} {
		stderr.Reset()
		logger, _, err = newLogger(&flags.Config{LogLevel: level}, false, &stderr)
		require.NoError(t, err)
		logger.Debug("D")
		logger.Info("I")
		logger.Warn("W")
		logger.Error("E")
		var got []string
		for _, m := range []string{"D", "I", "W", "E"} {
			if bytes.Contains(stderr.Bytes(), []byte("msg="+m+"\n")) {
				got = append(got, m)
			}
		}
		assert.ElementsMatch(t, shown, got, "--log-level %s", level)
	}

	// A log file takes the foreground's logs too, appended.
	path := filepath.Join(t.TempDir(), "ferry.log")
	require.NoError(t, os.WriteFile(path, []byte("earlier\n"), 0o600))
	stderr.Reset()
	logger, out, err = newLogger(&flags.Config{LogFile: path}, false, &stderr)
	require.NoError(t, err)
	logger.Info("later")
	require.NoError(t, out.Close())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Regexp(t, `^earlier\ntime=\S+ level=INFO msg=later\n$`, string(data))
	assert.Empty(t, stderr.String())
}

// nopWriteCloser is a syslog that takes anything.
type nopWriteCloser struct{ bytes.Buffer }

func (*nopWriteCloser) Close() error { return nil }

// TestLoggerBackgroundDefault: the background logs to syslog, or without
// a syslog socket to the default file, never nowhere, and says so there.
func TestLoggerBackgroundDefault(t *testing.T) {
	sys := &nopWriteCloser{}
	dialSyslog = func() (io.WriteCloser, error) { return sys, nil }
	path := filepath.Join(t.TempDir(), "state", "ferry", "ferry.log")
	defaultLogFile = func() string { return path }
	stderr, err := dupStderr(t)
	require.NoError(t, err)
	t.Cleanup(func() {
		dialSyslog, defaultLogFile = realDialSyslog, realDefaultLogFile
		restoreStderr(t, stderr)
	})

	logger, out, err := newLogger(&flags.Config{}, true, nil)
	require.NoError(t, err)
	logger.Info("to syslog")
	require.NoError(t, out.Close())
	assert.Contains(t, sys.String(), "msg=\"to syslog\"")
	assert.NotContains(t, sys.String(), "time=", "syslog stamps its own time")
	assert.NoFileExists(t, path)
	assert.True(t, syslogAvailable())

	dialSyslog = func() (io.WriteCloser, error) { return nil, errors.New("Unix syslog delivery error") }
	assert.False(t, syslogAvailable())
	logger, out, err = newLogger(&flags.Config{}, true, nil)
	require.NoError(t, err)
	logger.Info("to the default file")
	require.NoError(t, out.Close())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(data), "level=WARN msg=\"no syslog socket: logging to the default file (set --log-file to choose)\" path="+path)
	assert.Contains(t, string(data), "msg=\"to the default file\"")

	// The parent opens the same file for the child, or says why it cannot.
	f, defaulted, err := backgroundLog(&flags.Config{})
	require.NoError(t, err)
	assert.True(t, defaulted)
	assert.Equal(t, path, f.Name())
	f.Close()
	blocker := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600))
	defaultLogFile = func() string { return filepath.Join(blocker, "ferry.log") }
	_, _, err = backgroundLog(&flags.Config{})
	assert.ErrorContains(t, err, "no syslog socket, and the default log file "+blocker+"/ferry.log cannot be written")
	assert.ErrorContains(t, err, "give --log-file")
	_, _, err = newLogger(&flags.Config{}, true, nil)
	assert.ErrorContains(t, err, "give --log-file")
}

var (
	realDialSyslog     = dialSyslog
	realDefaultLogFile = defaultLogFile
)

// dupStderr keeps a copy of fd 2, which a background logger points at
// its log file.
func dupStderr(t *testing.T) (int, error) {
	t.Helper()
	return unix.Dup(2)
}

func restoreStderr(t *testing.T, fd int) {
	t.Helper()
	require.NoError(t, unix.Dup3(fd, 2, 0))
	unix.Close(fd)
}
