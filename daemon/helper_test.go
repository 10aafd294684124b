package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/flags"
)

func TestIsMountHelper(t *testing.T) {
	for argv0, want := range map[string]bool{
		"/sbin/mount.ferry": true, "mount.ferry": true, "/sbin/mount.ferry.gcs": true,
		"ferry": false, "/usr/bin/ferry": false, "/sbin/mount.ferryx": false, "/sbin/mount.fuse": false,
	} {
		assert.Equal(t, want, IsMountHelper(argv0), argv0)
	}
}

func TestParseHelperArgs(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want HelperArgs
	}{
		{[]string{"gs://b", "/mnt"}, HelperArgs{Args: []string{"--", "gs://b", "/mnt"}}},
		{[]string{"gs://b/p", "/mnt", "-o", "rw,cache_dir=/ssd,allow_other"},
			HelperArgs{Args: []string{"--cache-dir=/ssd", "--allow-other", "--", "gs://b/p", "/mnt"}}},
		// getopt order: options first, attached values, clusters, repeats.
		{[]string{"-n", "-oro", "-o", "metadata_ttl=-1", "-t", "ferry", "s3://b", "/m"},
			HelperArgs{Args: []string{"--ro", "--metadata-ttl=-1", "--", "s3://b", "/m"}}},
		{[]string{"gs://b", "-sfvn", "/m", "-o", "nodev,frob"},
			HelperArgs{Args: []string{"--kernel-option=nodev", "--", "gs://b", "/m"}, Unknown: []string{"frob"}, Fake: true}},
		{[]string{"-vo", "debug", "--", "gs://b", "/m"},
			HelperArgs{Args: []string{"--debug", "--", "gs://b", "/m"}}},
	} {
		got, err := ParseHelperArgs(tc.argv)
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
		_, err := ParseHelperArgs(tc.argv)
		require.Error(t, err, "%v", tc.argv)
		assert.Contains(t, err.Error(), tc.msg)
		assert.ErrorIs(t, err, flags.ErrInvalid)
	}
}

func TestInstallHelper(t *testing.T) {
	dir := t.TempDir()
	dest := filepath.Join(dir, "mount.ferry")
	require.NoError(t, InstallHelper("/usr/bin/ferry", dest))
	got, err := os.Readlink(dest)
	require.NoError(t, err)
	assert.Equal(t, "/usr/bin/ferry", got)

	// Re-installing replaces our symlink.
	require.NoError(t, InstallHelper("/opt/ferry", dest))
	got, _ = os.Readlink(dest)
	assert.Equal(t, "/opt/ferry", got)

	// A real file is never replaced; a wrong name is refused.
	require.NoError(t, os.Remove(dest))
	require.NoError(t, os.WriteFile(dest, []byte("#!/bin/sh\n"), 0o755))
	assert.ErrorIs(t, InstallHelper("/opt/ferry", dest), errHelperExists)
	assert.Error(t, InstallHelper("/opt/ferry", filepath.Join(dir, "mount.other")))
}

func TestGoBuildDir(t *testing.T) {
	assert.True(t, goBuildDir.MatchString("/tmp/go-build3274905098/b001/exe/ferry"))
	assert.False(t, goBuildDir.MatchString("/home/me/go-builds/ferry"))
	assert.False(t, goBuildDir.MatchString("/usr/local/bin/ferry"))
}
