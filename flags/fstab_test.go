package flags

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseMountOptions(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"ro", []string{"--ro"}},
		{"cache_dir=/x", []string{"--cache-dir=/x"}},
		{"allow_other", []string{"--allow-other"}},
		{"allow_other=false", []string{"--allow-other=false"}},
		{"debug=1", []string{"--debug=true"}},
		{"ro,_netdev,allow_other,cache_dir=/ssd/ferry,metadata_ttl=-1",
			[]string{"--ro", "--allow-other", "--cache-dir=/ssd/ferry", "--metadata-ttl=-1"}},
		{"defaults,auto,noauto,user,nouser,users,owner,group,nofail,rw,relatime,async,sync,dirsync", nil},
		{"x-systemd.automount,x-systemd.idle-timeout=60,x-gvfs-show,comment=dataset,user=alice", nil},
		{"nodev,nosuid,noexec,noatime,dev,suid,exec,atime", []string{
			"--kernel-option=nodev", "--kernel-option=nosuid", "--kernel-option=noexec", "--kernel-option=noatime",
			"--kernel-option=dev", "--kernel-option=suid", "--kernel-option=exec", "--kernel-option=atime"}},
		// What mount(8) 2.38 hands the helper for fstab "user" and "-o users".
		{"ro,noexec,nosuid,nodev,user=alice,user", []string{"--ro",
			"--kernel-option=noexec", "--kernel-option=nosuid", "--kernel-option=nodev"}},
		{"rw,noexec,nosuid,nodev,users", []string{
			"--kernel-option=noexec", "--kernel-option=nosuid", "--kernel-option=nodev"}},
		{"noatime,nodiratime,lazytime,strictatime,nosymfollow,iversion,mand,silent", []string{"--kernel-option=noatime"}},
		{"kernel_option=nodev", []string{"--kernel-option=nodev"}},
		{",ro,,", []string{"--ro"}},
		{`cache_dir="/ssd/a,b",ro`, []string{"--cache-dir=/ssd/a,b", "--ro"}},
		{"endpoint=http://h:9000/?a=b", []string{"--endpoint=http://h:9000/?a=b"}},
		{"cache_size=200GiB,cache_min_free=10%,memory_limit=1GiB", []string{
			"--cache-size=200GiB", "--cache-min-free=10%", "--memory-limit=1GiB"}},
		{"cache_dir=", []string{"--cache-dir="}},
	} {
		got, err := ParseMountOptions(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestParseMountOptionsErrors(t *testing.T) {
	for _, tc := range []struct{ in, msg string }{
		{"cache-dir=/x", "-o cache-dir=/x: unknown mount option"},
		{"ro,frobnicate", "-o frobnicate: unknown mount option"},
		{"nodev=1", "-o nodev=1: unknown mount option"},
		{"comment=x,a=b", "-o a=b: unknown mount option"},
		{"cache_dir", "-o cache_dir: needs a value (cache_dir=PATH)"},
		{"allow_other=maybe", "-o allow_other=maybe: not true or false"},
		{`cache_dir="/a`, "unbalanced double quote"},
		{`cache_dir=/a"b"`, `-o cache_dir=/a"b": quote the whole value`},
	} {
		_, err := ParseMountOptions(tc.in)
		require.Error(t, err, tc.in)
		assert.Contains(t, err.Error(), tc.msg)
		assert.ErrorIs(t, err, ErrInvalid)
	}
}

func TestParseMountOptionsSloppy(t *testing.T) {
	args, unknown, err := ParseMountOptionsSloppy("ro,frobnicate,cache_dir=/x,zap=1")
	require.NoError(t, err)
	assert.Equal(t, []string{"--ro", "--cache-dir=/x"}, args)
	assert.Equal(t, []string{"frobnicate", "zap=1"}, unknown)
	// Structural errors are still errors.
	_, _, err = ParseMountOptionsSloppy("cache_dir")
	assert.Error(t, err)
}

// TestMountOptionsRoundTrip: every option's fstab spelling is accepted and
// the resulting arguments parse into the same Config as the flags.
func TestMountOptionsRoundTrip(t *testing.T) {
	args, err := ParseMountOptions("cache_dir=/c,cache_size=1GiB,metadata_ttl=-1,allow_other,file_mode=0640,nodev,log_format=json")
	require.NoError(t, err)
	fromFstab, err := parse(t, append(args, "gs://b", "/m")...)
	require.NoError(t, err)
	fromFlags, err := parse(t, "--cache-dir=/c", "--cache-size=1GiB", "--metadata-ttl=-1", "--allow-other",
		"--file-mode=0640", "--kernel-option=nodev", "--log-format=json", "gs://b", "/m")
	require.NoError(t, err)
	assert.Equal(t, fromFlags, fromFstab)

	for _, o := range Options {
		in := o.Fstab + "=" + o.Default
		if o.Kind == Bool {
			in = o.Fstab
		}
		got, err := ParseMountOptions(in)
		require.NoError(t, err, in)
		require.Len(t, got, 1, in)
		assert.True(t, strings.HasPrefix(got[0], o.Flag()), "%s -> %v", in, got)
	}
}

func FuzzParseMountOptions(f *testing.F) {
	for _, seed := range []string{
		"", "ro", "ro,_netdev,allow_other,cache_dir=/ssd/ferry,metadata_ttl=-1",
		`cache_dir="/a,b",nodev`, `"`, `a="`, "=,=", "x-systemd.automount", "comment=x,y",
		"allow_other=maybe", "cache_dir", ",,,", "rw,defaults", "kernel_option=nodev", "\x00=\xff",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args, err := ParseMountOptions(s)
		sArgs, unknown, sErr := ParseMountOptionsSloppy(s)
		if err != nil {
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Nil(t, args)
			var ue *UnknownMountOptionError
			if !errors.As(err, &ue) {
				// Not about an unknown option: sloppy fails the same way.
				assert.Equal(t, err, sErr)
			}
			return
		}
		// Strict success: sloppy agrees and found nothing unknown.
		require.NoError(t, sErr)
		assert.Equal(t, args, sArgs)
		assert.Empty(t, unknown)
		// Every argument is one known flag, in --name or --name=value form.
		for _, a := range args {
			require.True(t, strings.HasPrefix(a, "--"), a)
			name, _, _ := strings.Cut(a[2:], "=")
			o, ok := Lookup(name)
			require.True(t, ok, "unknown flag in %q", a)
			require.Equal(t, name, o.Name, "flags use the dash spelling: %q", a)
		}
		assert.LessOrEqual(t, len(args), strings.Count(s, ",")+1)
	})
}

// TestMountOptionErrorsNameWhatWasWritten: mount(8)'s helper turns -o into
// flags, and the errors about them name the option as fstab spells it,
// with the value once.
func TestMountOptionErrorsNameWhatWasWritten(t *testing.T) {
	for _, tc := range []struct {
		opts, msg string
	}{
		{"memory_limit=lots", "-o memory_limit=lots: not a size (use e.g. 200GiB)"},
		{"cache_dir=/c,cache_size=-5GiB", "-o cache_size=-5GiB: negative"},
		{"metadata_ttl=-2s", "-o metadata_ttl=-2s: negative; only -1 (forever) is allowed"},
		{"file_mode=0999", "-o file_mode=0999: not an octal mode (use e.g. 0444)"},
		// About the option beside others: no value to name, and the
		// others named as -o spells them.
		{"cache_size=1GiB", "-o cache_size: needs cache_dir (there is no disk cache without it)"},
	} {
		args, err := ParseMountOptions(tc.opts)
		require.NoError(t, err, tc.opts)
		_, err = parse(t, append(args, "gs://b", "/m")...)
		require.Error(t, err, tc.opts)
		assert.Equal(t, tc.msg, AsMountOption(err).Error(), tc.opts)
		assert.ErrorIs(t, err, ErrInvalid)
	}
	assert.NoError(t, AsMountOption(nil))
	other := errors.New("not an option")
	assert.Equal(t, other, AsMountOption(other))
}
