package daemon

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeChildEnv makes the test binary play the background child (see
// TestMain), so the readiness protocol is tested without FUSE.
const fakeChildEnv = "FERRY_TEST_FAKE_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeChildEnv); mode != "" {
		os.Exit(fakeChild(mode))
	}
	os.Exit(m.Run())
}

// testExitCode is main's classification, as far as these tests need it.
func testExitCode(err error) int {
	var ue UsageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	return ExitMountError
}

func fakeChild(mode string) int {
	pipe, ok := backgroundChild(testExitCode)
	if !ok {
		return 99
	}
	if os.Getenv(daemonEnv) != "" {
		return 98 // the marker must not leak to what the child starts
	}
	switch mode {
	case "ok":
		pipe.report(nil)
		pipe.report(errors.New("reported twice")) // a no-op: once only
		time.Sleep(200 * time.Millisecond)        // keeps running after reporting
		return 0
	case "usage":
		pipe.report(UsageError{errors.New("bad\nthing")})
		return ExitUsage
	case "fail":
		pipe.report(errors.New("bucket gone"))
		return ExitMountError
	case "die":
		return 3
	case "hang":
		time.Sleep(time.Hour)
	}
	return 97
}

func startFake(t *testing.T, mode string, timeout time.Duration) error {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	return startBackground(context.Background(), backgroundRequest{
		Exe:        exe,
		Args:       []string{"-test.run=^$"},
		Env:        []string{fakeChildEnv + "=" + mode},
		MountPoint: t.TempDir(),
		Timeout:    timeout,
	})
}

func TestBackgroundReadiness(t *testing.T) {
	require.NoError(t, startFake(t, "ok", time.Minute))

	var ce *ChildError
	err := startFake(t, "usage", time.Minute)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "bad thing", err.Error(), "one line")
	assert.Equal(t, ExitUsage, ce.Code)

	err = startFake(t, "fail", time.Minute)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "bucket gone", err.Error())
	assert.Equal(t, ExitMountError, ce.Code)

	// A child that dies without a word: the parent's own error.
	err = startFake(t, "die", time.Minute)
	require.ErrorIs(t, err, errNotReady)
	assert.Contains(t, err.Error(), "exit status 3")
	assert.False(t, errors.As(err, &ce))

	// The parent never hangs: a silent child is killed at the deadline.
	err = startFake(t, "hang", 500*time.Millisecond)
	require.ErrorIs(t, err, errNotReady)
	assert.Contains(t, err.Error(), "killed it")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	exe, _ := os.Executable()
	err = startBackground(ctx, backgroundRequest{Exe: exe, Args: []string{"-test.run=^$"},
		Env: []string{fakeChildEnv + "=hang"}, MountPoint: t.TempDir(), Timeout: time.Minute})
	require.ErrorIs(t, err, errNotReady)
	assert.Contains(t, err.Error(), "interrupted")
}

// Not the background child: no pipe, and fd 3 is left alone.
func TestBackgroundChildMarker(t *testing.T) {
	t.Setenv(daemonEnv, "")
	_, ok := backgroundChild(testExitCode)
	assert.False(t, ok)
	t.Setenv(daemonEnv, "4")
	_, ok = backgroundChild(testExitCode)
	assert.False(t, ok, "only fd 3 is the pipe")
}

func TestParseChildError(t *testing.T) {
	assert.Equal(t, &ChildError{Code: 1, Msg: "a b"}, parseChildError("1 a b"))
	assert.Equal(t, &ChildError{Code: ExitMountError, Msg: "garbage"}, parseChildError("garbage"))
	assert.Equal(t, &ChildError{Code: ExitMountError, Msg: "0 zero"}, parseChildError("0 zero"), "0 is no failure")
	assert.Equal(t, &ChildError{Code: ExitMountError, Msg: "256 big"}, parseChildError("256 big"))
}
