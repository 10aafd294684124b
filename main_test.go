package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/control"
	"ferry/daemon"
	"ferry/flags"
	"ferry/mountinfo"
)

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
		{[]string{"ferry", "gs://b"}, exitUsage, "ferry: need SOURCE and MOUNTPOINT"},
		{[]string{"ferry", "--cache-dir=/c", "--cache-size=12 parsecs", "gs://b", mnt},
			exitUsage, `ferry: --cache-size: "12 parsecs" is not a size (use e.g. 200GiB)`},
		{[]string{"ferry", "gs://b", mnt, "--log-format=xml"}, exitUsage, "ferry: --log-format:"},
		{[]string{"ferry", "--bogus", "gs://b", mnt}, exitUsage, "ferry: unknown flag --bogus (ferry --help lists them)"},
		{[]string{"ferry", "warm", "--bogus", mnt}, exitUsage, "ferry: unknown flag --bogus (ferry warm --help lists them)"},
		{[]string{"ferry", "warm", "-q", mnt}, exitUsage, "ferry: unknown flag -q (ferry warm --help lists them)"},
		{[]string{"ferry", "warm", "--parallel", "many", mnt}, exitUsage, `ferry: invalid value "many" for flag --parallel: parse error`},
		{[]string{"ferry", "invalidate", "--data=maybe", mnt}, exitUsage, `ferry: invalid boolean value "maybe" for --data: parse error`},
		{[]string{"ferry", "install-helper", "--dest"}, exitUsage, "ferry: flag needs an argument: --dest"},
		{[]string{"ferry", "ftp://b", mnt}, exitUsage, `ferry: source "ftp://b": unknown scheme "ftp" (use gs://, s3:// or file://)`},
		{[]string{"ferry", "gs://b", filepath.Join(mnt, "missing")}, exitUsage, "does not exist"},
		{[]string{"ferry", "gs://b", notDir}, exitUsage, "is not a directory"},
		{[]string{"ferry", "gs://b", full}, exitUsage, "is not empty"},
		{[]string{"ferry", "gs://b", mnt, "--log-file"}, exitUsage, "ferry: --log-file needs a value"},
		{[]string{"ferry", "--kernel-option=noexecc", "gs://b", mnt}, exitUsage, "--kernel-option: \"noexecc\" is not a kernel mount option"},
		{[]string{"/sbin/mount.ferry", "gs://b", mnt, "-o", "frob"}, exitUsage, "mount.ferry: -o frob: unknown mount option"},
		{[]string{"/sbin/mount.ferry", "gs://b", mnt, "-o", "memory_limit=1KiB"}, exitUsage, "mount.ferry: -o memory_limit=1KiB: 1.0 KiB is below the minimum"},
		{[]string{"/sbin/mount.ferry", "gs://b", mnt, "-o", "ro,memory_limit=lots"}, exitUsage, "mount.ferry: -o memory_limit=lots: not a size (use e.g. 200GiB)\n"},
		{[]string{"/sbin/mount.ferry", "gs://b", mnt, "-o", "cache_size=1GiB"}, exitUsage, "mount.ferry: -o cache_size: needs cache_dir"},
		{[]string{"/sbin/mount.ferry", "gs://b"}, exitUsage, "mount.ferry: need SOURCE and DIR"},
		{[]string{"ferry", "help", "nothing"}, exitUsage, `ferry: help: no command "nothing" (ferry has install-helper, docs, warm, invalidate, stats, version, help)`},
		{[]string{"ferry", "docs", "nothing"}, exitUsage, "usage: ferry docs flags"},
	} {
		code, stdout, stderr := runCmd(tc.argv...)
		assert.Equal(t, tc.code, code, "%v: %s", tc.argv, stderr)
		assert.Contains(t, stderr, tc.msg, "%v", tc.argv)
		assert.Empty(t, stdout, "%v: no help text after the error", tc.argv)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	}
}

// TestRunStoreMessages: a source that cannot be opened gets one line that
// names it, says what is wrong once, and what to do where a flag does it.
func TestRunStoreMessages(t *testing.T) {
	mnt := t.TempDir()
	missing := filepath.Join(t.TempDir(), "does-not-exist")
	code, stdout, stderr := runCmd("ferry", "--foreground", "file://"+missing, mnt)
	assert.Equal(t, exitMountError, code)
	assert.Empty(t, stdout)
	assert.Equal(t, "ferry: file://"+missing+": no such directory\n", stderr)

	// No Google credentials anywhere: --anonymous is named.
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	t.Setenv("CLOUDSDK_CONFIG", t.TempDir())
	t.Setenv("GCE_METADATA_HOST", "")
	code, _, stderr = runCmd("ferry", "--foreground", "--retry-max-time=1s", "gs://some-bucket", mnt)
	if strings.Contains(stderr, "no credentials found") {
		assert.Equal(t, exitMountError, code)
		assert.Equal(t, "ferry: gs://some-bucket/: gcs: no credentials found (no GOOGLE_APPLICATION_CREDENTIALS, no gcloud application default credentials, not on Google Cloud): add --anonymous for a public bucket, or give --key-file FILE\n", stderr)
	} else {
		t.Logf("this machine has Google credentials (a metadata server): %s", stderr)
	}
	assert.False(t, mountinfo.IsMountPoint(mnt))
}

func TestRunHelp(t *testing.T) {
	code, out, stderr := runCmd("ferry", "help")
	assert.Equal(t, exitOK, code, stderr)
	_, want, _ := runCmd("ferry", "--help")
	assert.Equal(t, want, out, "ferry help is ferry --help")
	assert.Contains(t, out, "USAGE:")
	code, out, stderr = runCmd("ferry", "help", "warm")
	assert.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "ferry warm - read files")
	assert.Contains(t, out, "--check")
}

func TestRunFakeMount(t *testing.T) {
	// mount -f: everything is checked, nothing is started or mounted.
	mnt := t.TempDir()
	code, _, stderr := runCmd("/sbin/mount.ferry", "gs://b", mnt, "-f", "-o", "ro,allow_other,nodev")
	assert.Equal(t, exitOK, code, stderr)
	assert.False(t, mountinfo.IsMountPoint(mnt))

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

func TestExitCode(t *testing.T) {
	assert.Equal(t, exitOK, exitCode(nil))
	assert.Equal(t, exitUsage, exitCode(usageError{Err: errors.New("x")}))
	assert.Equal(t, exitUsage, exitCode(&flags.OptionError{Option: "uid", Err: errors.New("x")}))
	assert.Equal(t, exitMountError, exitCode(errors.New("store down")))
	assert.Equal(t, 1, exitCode(fmt.Errorf("warm: %w", &control.OperationError{Msg: "2 errors"})))
	assert.Equal(t, exitUsage, exitCode(fmt.Errorf("mounting: %w", bucket.ErrInvalid)))
	// The background child's own status, as it reported it.
	assert.Equal(t, 7, exitCode(&daemon.ChildError{Code: 7, Msg: "x"}))
}

func TestReadPathList(t *testing.T) {
	f := filepath.Join(t.TempDir(), "list")
	require.NoError(t, os.WriteFile(f, []byte("/mnt/a\n\n/mnt/b c\r\n  \n"), 0o600))
	got, err := readPathList(f, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"/mnt/a", "/mnt/b c"}, got)
	got, err = readPathList("-", strings.NewReader("x\ny\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"x", "y"}, got)
}
