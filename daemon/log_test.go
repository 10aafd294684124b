package daemon

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/flags"
)

func TestLoggerToFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ferry.log")
	logger, closer, err := newLogger(&flags.Config{LogFile: path, LogFormat: "json", Debug: true}, true, nil)
	require.NoError(t, err)
	logger.Debug("hello", "k", 1)
	require.NoError(t, closer.Close())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(data, &rec))
	assert.Equal(t, "hello", rec["msg"])
	assert.Equal(t, "DEBUG", rec["level"])

	_, _, err = newLogger(&flags.Config{LogFile: "/nonexistent/dir/ferry.log"}, false, nil)
	var oe *flags.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "log-file", oe.Option)
}

// TestLoggerDestinations: the foreground logs to the caller's stderr, as
// text or JSON, at debug level only with --debug.
func TestLoggerDestinations(t *testing.T) {
	var stderr bytes.Buffer
	logger, closer, err := newLogger(&flags.Config{LogFormat: "text"}, false, &stderr)
	require.NoError(t, err)
	logger.Debug("hidden")
	logger.Info("mounted", "mountpoint", "/mnt/x")
	require.NoError(t, closer.Close())
	assert.Regexp(t, `^time=\S+ level=INFO msg=mounted mountpoint=/mnt/x\n$`, stderr.String())

	stderr.Reset()
	logger, _, err = newLogger(&flags.Config{LogFormat: "json", Debug: true}, false, &stderr)
	require.NoError(t, err)
	logger.Debug("shown")
	var rec map[string]any
	require.NoError(t, json.Unmarshal(stderr.Bytes(), &rec))
	assert.Equal(t, "shown", rec["msg"])
	assert.Contains(t, rec, "time")

	// A log file takes the foreground's logs too, appended.
	path := filepath.Join(t.TempDir(), "ferry.log")
	require.NoError(t, os.WriteFile(path, []byte("earlier\n"), 0o600))
	stderr.Reset()
	logger, closer, err = newLogger(&flags.Config{LogFile: path}, false, &stderr)
	require.NoError(t, err)
	logger.Info("later")
	require.NoError(t, closer.Close())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Regexp(t, `^earlier\ntime=\S+ level=INFO msg=later\n$`, string(data))
	assert.Empty(t, stderr.String())

	// The background without a log file has no stderr: syslog, or nowhere.
	logger, closer, err = newLogger(&flags.Config{}, true, nil)
	require.NoError(t, err)
	logger.Info("to syslog, if there is one")
	assert.NoError(t, closer.Close())
}
