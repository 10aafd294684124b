package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/flags"
)

// fakeChildEnv makes the test binary play the background child (see
// TestMain), so the readiness protocol is tested without FUSE.
const fakeChildEnv = "FERRY_TEST_FAKE_CHILD"

// askControlEnv makes the test binary ask the control socket it names
// and print the answer, or with floodControlEnv hold that many
// connections to it open, unused, until killed (see
// TestAbstractControlSocket).
const (
	askControlEnv   = "FERRY_TEST_ASK_CONTROL"
	floodControlEnv = "FERRY_TEST_FLOOD_CONTROL"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeChildEnv); mode != "" {
		os.Exit(fakeChild(mode))
	}
	if socket := os.Getenv(askControlEnv); socket != "" {
		os.Exit(askControlChild(socket))
	}
	os.Exit(m.Run())
}

// askControlChild is the test binary run with askControlEnv: it asks the
// socket and prints the answer, or (floodControlEnv) holds connections.
func askControlChild(socket string) int {
	if n, _ := strconv.Atoi(os.Getenv(floodControlEnv)); n > 0 {
		var conns []net.Conn // kept reachable: a lost conn is closed
		for i := range n {
			conn, err := net.Dial("unix", socket)
			if err != nil {
				fmt.Printf("connection %d: %v\n", i, err)
				return 1
			}
			conns = append(conns, conn)
		}
		fmt.Printf("holding %d connections\n", len(conns))
		time.Sleep(time.Hour)
		runtime.KeepAlive(conns)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := callControl(ctx, socket, &controlRequest{Op: "launch"})
	fmt.Printf("uid %d asked: %v\n", os.Getuid(), err)
	return 0
}

func fakeChild(mode string) int {
	pipe, ok := daemonChild()
	if !ok {
		return 99
	}
	if os.Getenv(daemonEnv) != "" {
		return 98 // the marker must not leak to what the child starts
	}
	switch mode {
	case "ok":
		pipe.report(nil)
		time.Sleep(200 * time.Millisecond) // keeps running after reporting
		return 0
	case "usage":
		pipe.report(usageError{errors.New("bad\nthing")})
		return exitUsage
	case "fail":
		pipe.report(errors.New("bucket gone"))
		return exitMountError
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

	err := startFake(t, "usage", time.Minute)
	require.Error(t, err)
	assert.Equal(t, "bad thing", err.Error(), "one line")
	assert.Equal(t, exitUsage, exitCode(err))

	err = startFake(t, "fail", time.Minute)
	require.Error(t, err)
	assert.Equal(t, "bucket gone", err.Error())
	assert.Equal(t, exitMountError, exitCode(err))

	err = startFake(t, "die", time.Minute)
	require.ErrorIs(t, err, errNotReady)
	assert.Contains(t, err.Error(), "exit status 3")
	assert.Equal(t, exitMountError, exitCode(err))

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

func TestParseHelperArgs(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want helperArgs
	}{
		{[]string{"gs://b", "/mnt"}, helperArgs{args: []string{"--", "gs://b", "/mnt"}}},
		{[]string{"gs://b/p", "/mnt", "-o", "rw,cache_dir=/ssd,allow_other"},
			helperArgs{args: []string{"--cache-dir=/ssd", "--allow-other", "--", "gs://b/p", "/mnt"}}},
		// getopt order: options first, attached values, clusters, repeats.
		{[]string{"-n", "-oro", "-o", "metadata_ttl=-1", "-t", "ferry", "s3://b", "/m"},
			helperArgs{args: []string{"--ro", "--metadata-ttl=-1", "--", "s3://b", "/m"}}},
		{[]string{"gs://b", "-sfvn", "/m", "-o", "nodev,frob"},
			helperArgs{args: []string{"--kernel-option=nodev", "--", "gs://b", "/m"}, unknown: []string{"frob"}, fake: true}},
		{[]string{"-vo", "debug", "--", "gs://b", "/m"},
			helperArgs{args: []string{"--debug", "--", "gs://b", "/m"}}},
	} {
		got, err := parseHelperArgs(tc.argv)
		require.NoError(t, err, "%v", tc.argv)
		assert.Equal(t, tc.want, got, "%v", tc.argv)
	}

	for _, tc := range []struct {
		argv []string
		msg  string
	}{
		{[]string{"gs://b"}, "need SOURCE and DIR"},
		{[]string{"gs://b", "/m", "/x"}, "need SOURCE and DIR"},
		{[]string{"gs://b", "/m", "-o"}, "-o needs a value"},
		{[]string{"gs://b", "/m", "-x"}, "unknown option -x"},
		{[]string{"gs://b", "/m", "-N", "/proc/1/ns/mnt"}, "namespaces are not supported"},
		{[]string{"gs://b", "/m", "-o", "frob"}, "-o frob: unknown mount option"},
	} {
		_, err := parseHelperArgs(tc.argv)
		require.Error(t, err, "%v", tc.argv)
		assert.Contains(t, err.Error(), tc.msg)
		assert.ErrorIs(t, err, flags.ErrInvalid)
	}
}

func TestPermuteArgs(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{nil, nil},
		{[]string{"gs://b", "/m"}, []string{"--", "gs://b", "/m"}},
		{[]string{"gs://b", "/m", "--foreground", "--cache-dir", "/c"},
			[]string{"--foreground", "--cache-dir", "/c", "--", "gs://b", "/m"}},
		{[]string{"--debug", "gs://b", "--metadata-ttl=-1", "/m"},
			[]string{"--debug", "--metadata-ttl=-1", "--", "gs://b", "/m"}},
		// A value that looks like a flag stays with its option.
		{[]string{"--metadata-ttl", "-1", "gs://b", "/m"}, []string{"--metadata-ttl", "-1", "--", "gs://b", "/m"}},
		{[]string{"--foreground", "--", "-odd", "/m"}, []string{"--foreground", "--", "-odd", "/m"}},
		{[]string{"install-helper", "--dest", "/x/mount.ferry"}, []string{"install-helper", "--dest", "/x/mount.ferry"}},
		{[]string{"--help"}, []string{"--help"}},
		{[]string{"warm", "--parallel", "4", "/m/train"}, []string{"warm", "--parallel", "4", "/m/train"}},
		{[]string{"invalidate", "--data", "/m"}, []string{"invalidate", "--data", "/m"}},
	} {
		got, err := permuteArgs(tc.in)
		require.NoError(t, err, "%v", tc.in)
		assert.Equal(t, tc.want, got, "%v", tc.in)
	}
	// A value flag without its value must not take the "--" we add.
	for _, in := range [][]string{
		{"gs://b", "/m", "--log-file"},
		{"--cache-dir", "--", "gs://b", "/m"},
	} {
		_, err := permuteArgs(in)
		assert.ErrorContains(t, err, "needs a value", "%v", in)
	}
}

// runCmd runs the command in-process and returns exit code, stdout, stderr.
func runCmd(argv ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(argv, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRunErrors(t *testing.T) {
	mnt := t.TempDir()
	full := t.TempDir()
	notDir := filepath.Join(full, "file")
	require.NoError(t, os.WriteFile(notDir, nil, 0o644))
	for _, tc := range []struct {
		argv []string
		code int
		msg  string
	}{
		{[]string{"ferry", "gs://b"}, exitUsage, "ferry: invalid option: need SOURCE and MOUNTPOINT"},
		{[]string{"ferry", "--cache-dir=/c", "--cache-size=12 parsecs", "gs://b", mnt},
			exitUsage, `ferry: --cache-size: "12 parsecs" is not a size (use e.g. 200GiB)`},
		{[]string{"ferry", "gs://b", mnt, "--log-format=xml"}, exitUsage, "ferry: --log-format:"},
		{[]string{"ferry", "--bogus", "gs://b", mnt}, exitUsage, "ferry: unknown flag --bogus (ferry --help lists them)"},
		{[]string{"ferry", "warm", "--bogus", mnt}, exitUsage, "ferry: unknown flag --bogus (ferry warm --help lists them)"},
		{[]string{"ferry", "warm", "-q", mnt}, exitUsage, "ferry: unknown flag -q (ferry warm --help lists them)"},
		{[]string{"ferry", "warm", "--parallel", "many", mnt}, exitUsage, `ferry: invalid value "many" for flag --parallel: parse error`},
		{[]string{"ferry", "invalidate", "--data=maybe", mnt}, exitUsage, `ferry: invalid boolean value "maybe" for --data: parse error`},
		{[]string{"ferry", "install-helper", "--dest"}, exitUsage, "ferry: flag needs an argument: --dest"},
		{[]string{"ferry", "ftp://b", mnt}, exitUsage, `unknown scheme "ftp"`},
		{[]string{"ferry", "gs://b", filepath.Join(mnt, "missing")}, exitUsage, "does not exist"},
		{[]string{"ferry", "gs://b", notDir}, exitUsage, "is not a directory"},
		{[]string{"ferry", "gs://b", full}, exitUsage, "is not empty"},
		{[]string{"ferry", "gs://b", mnt, "--log-file"}, exitUsage, "ferry: --log-file needs a value"},
		{[]string{"ferry", "--kernel-option=noexecc", "gs://b", mnt}, exitUsage, "--kernel-option: \"noexecc\" is not a kernel mount option"},
		{[]string{"/sbin/mount.ferry", "gs://b", mnt, "-o", "frob"}, exitUsage, "mount.ferry: -o frob: unknown mount option"},
		{[]string{"/sbin/mount.ferry", "gs://b", mnt, "-o", "memory_limit=1KiB"}, exitUsage, "mount.ferry: --memory-limit: 1.0 KiB is below the minimum"},
		{[]string{"ferry", "docs", "nothing"}, exitUsage, "usage: ferry docs flags"},
	} {
		code, stdout, stderr := runCmd(tc.argv...)
		assert.Equal(t, tc.code, code, "%v: %s", tc.argv, stderr)
		assert.Contains(t, stderr, tc.msg, "%v", tc.argv)
		assert.Empty(t, stdout, "%v: no help text after the error", tc.argv)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	}
}

func TestRunFakeMount(t *testing.T) {
	// mount -f: everything is checked, nothing is started or mounted.
	mnt := t.TempDir()
	code, _, stderr := runCmd("/sbin/mount.ferry", "gs://b", mnt, "-f", "-o", "ro,allow_other,nodev")
	assert.Equal(t, exitOK, code, stderr)
	assert.False(t, isMountPoint(mnt))

	// A directory with files needs nonempty.
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "f"), nil, 0o644))
	code, _, stderr = runCmd("/sbin/mount.ferry", "gs://b", mnt, "-f", "-o", "ro")
	assert.Equal(t, exitUsage, code, stderr)
	assert.Contains(t, stderr, "is not empty")
	code, _, stderr = runCmd("/sbin/mount.ferry", "gs://b", mnt, "-f", "-o", "ro,nonempty")
	assert.Equal(t, exitOK, code, stderr)
}

func TestRunDocsAndHelp(t *testing.T) {
	code, out, _ := runCmd("ferry", "docs", "flags")
	require.Equal(t, exitOK, code)
	assert.Equal(t, flags.Markdown(), out)

	code, out, _ = runCmd("ferry", "--help")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "--cache-size SIZE")
	assert.Contains(t, out, "(default: 512MiB)")
	// A bool on by default says so; one off by default says nothing.
	assert.Regexp(t, `--read-ahead-files .*=false turns it off \(default: true\)`, out)
	assert.NotRegexp(t, `--foreground .*\(default`, out)
}

func TestInstallHelper(t *testing.T) {
	dir := t.TempDir()
	dest := filepath.Join(dir, "mount.ferry")
	require.NoError(t, installHelper("/usr/bin/ferry", dest))
	got, err := os.Readlink(dest)
	require.NoError(t, err)
	assert.Equal(t, "/usr/bin/ferry", got)

	// Re-installing replaces our symlink.
	require.NoError(t, installHelper("/opt/ferry", dest))
	got, _ = os.Readlink(dest)
	assert.Equal(t, "/opt/ferry", got)

	// A real file is never replaced; a wrong name is refused.
	require.NoError(t, os.Remove(dest))
	require.NoError(t, os.WriteFile(dest, []byte("#!/bin/sh\n"), 0o755))
	assert.ErrorIs(t, installHelper("/opt/ferry", dest), errHelperExists)
	assert.Error(t, installHelper("/opt/ferry", filepath.Join(dir, "mount.other")))
}

func TestMountinfo(t *testing.T) {
	assert.Equal(t, "/mnt/a b", unescapeMountinfo(`/mnt/a\040b`))
	assert.Equal(t, `/mnt/x\09`, unescapeMountinfo(`/mnt/x\09`), "not an escape")
	assert.Equal(t, "/plain", unescapeMountinfo("/plain"))
	_, ok := mountType("/")
	assert.True(t, ok, "/ is always a mount point")
	assert.False(t, isMountPoint(t.TempDir()))
}

func TestExitCode(t *testing.T) {
	assert.Equal(t, exitOK, exitCode(nil))
	assert.Equal(t, exitUsage, exitCode(usageError{errors.New("x")}))
	assert.Equal(t, exitUsage, exitCode(&flags.OptionError{Option: "uid", Err: errors.New("x")}))
	assert.Equal(t, exitMountError, exitCode(errors.New("store down")))
	assert.Equal(t, 1, exitCode(fmt.Errorf("warm: %w", &operationError{"2 errors"})))
	assert.Equal(t, &childError{code: 1, msg: "a b"}, parseChildError("1 a b"))
	assert.Equal(t, &childError{code: exitMountError, msg: "garbage"}, parseChildError("garbage"))
}

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

func TestGoBuildDir(t *testing.T) {
	assert.True(t, goBuildDir.MatchString("/tmp/go-build3274905098/b001/exe/ferry"))
	assert.False(t, goBuildDir.MatchString("/home/me/go-builds/ferry"))
	assert.False(t, goBuildDir.MatchString("/usr/local/bin/ferry"))
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:0": true, "[::1]:0": true, ":0": false, "0.0.0.0:0": false} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v", addr, err) // no IPv6 here
			continue
		}
		assert.Equal(t, want, loopback(ln.Addr()), addr)
		ln.Close()
	}
}
