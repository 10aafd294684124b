package flags

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// parse runs args through a real urfave/cli app built from CLIFlags, as
// main does.
func parse(t *testing.T, args ...string) (*Config, error) {
	t.Helper()
	var (
		cfg    *Config
		cfgErr error
		ran    bool
	)
	app := &cli.App{
		Name:           "ferry",
		Flags:          CLIFlags(),
		ExitErrHandler: func(*cli.Context, error) {},
		Action: func(c *cli.Context) error {
			ran = true
			cfg, cfgErr = FromContext(c)
			return nil
		},
	}
	app.Writer, app.ErrWriter = &strings.Builder{}, &strings.Builder{}
	if err := app.Run(append([]string{"ferry"}, args...)); err != nil {
		return nil, err
	}
	require.True(t, ran)
	return cfg, cfgErr
}

func TestTable(t *testing.T) {
	names := map[string]bool{}
	fstab := map[string]bool{}
	for _, o := range Options {
		t.Run(o.Name, func(t *testing.T) {
			assert.False(t, names[o.Name], "duplicate name")
			assert.False(t, fstab[o.Fstab], "duplicate fstab spelling")
			names[o.Name], fstab[o.Fstab] = true, true
			assert.Equal(t, strings.ReplaceAll(o.Name, "-", "_"), o.Fstab, "fstab spelling is the name with _ for -")
			assert.NotEmpty(t, o.Usage)
			assert.Contains(t, categoryOrder, o.Category)
			assert.NotNil(t, o.set)
			// fstab spellings must not be swallowed by the ignore list or
			// the kernel passthrough.
			assert.NotContains(t, ignoredMountOptions, o.Fstab)
			assert.NotContains(t, KernelMountOptions, o.Fstab)
			if o.Kind == Bool {
				assert.Contains(t, []string{"true", "false"}, o.Default)
			}
			// The default parses with the option's own parser.
			if o.Kind != List {
				var c Config
				require.NoError(t, o.set(&c, o.Default), "default %q", o.Default)
			}
		})
	}
	// Names scripts rely on.
	for _, n := range []string{"foreground", "endpoint", "anonymous", "region", "s3-path-style", "key-file",
		"billing-project", "metadata-ttl", "negative-ttl", "uid", "gid", "file-mode", "dir-mode", "allow-other",
		"log-file", "log-format", "debug", "cache-dir", "cache-size", "cache-min-free", "cache-block-size",
		"memory-limit", "max-connections", "read-ahead-kb", "metrics-addr", "ro"} {
		assert.True(t, names[n], "missing option --%s", n)
	}
}

func TestDefaults(t *testing.T) {
	cfg, err := parse(t, "gs://bucket/prefix", "/mnt/x")
	require.NoError(t, err)
	assert.Equal(t, &Config{
		Source:         "gs://bucket/prefix",
		MountPoint:     "/mnt/x",
		MaxConnections: 32,
		StoreTimeout:   20 * time.Second,
		RetryMaxTime:   30 * time.Second,
		MetadataTTL:    60 * time.Second,
		NegativeTTL:    5 * time.Second,
		Uid:            uint32(os.Getuid()),
		Gid:            uint32(os.Getgid()),
		FileMode:       0o444,
		DirMode:        0o555,
		CacheMinFree:   5 << 30,
		CacheBlockSize: 64 << 10, CachePassthrough: true,
		MemoryLimit:    512 << 20,
		MetadataLimit:  256 << 20,
		ReadAheadFiles: true,
		ReadAheadKB:    1024,
		MaxBackground:  64,
		LogFormat:      "text",
		LogLevel:       "info",
	}, cfg)
}

func TestAllOptions(t *testing.T) {
	dir := t.TempDir()
	key := dir + "/key.json"
	require.NoError(t, os.WriteFile(key, []byte("{}"), 0o600))
	cfg, err := parse(t,
		"--foreground", "--allow-other", "--ro", "--kernel-option=nodev", "--kernel-option", "noexec,nosuid",
		"--read-ahead-kb=0", "--read-ahead-files=false", "--max-background=256", "--endpoint=http://localhost:4443", "--anonymous",
		"--key-file="+key, "--billing-project=proj", "--max-connections=64", "--memory-limit=2GiB", "--metadata-limit=1GiB",
		"--store-timeout=5s", "--retry-max-time=90", "--nonempty",
		"--metadata-ttl=-1", "--negative-ttl=0", "--uid=1000", "--gid=1001", "--file-mode=640", "--dir-mode=0o750",
		"--cache-dir=rel/cache", "--cache-size=200GiB", "--cache-min-free=10%", "--cache-block-size=1MiB", "--cache-passthrough=false",
		"--log-file=/var/log/ferry.log", "--log-format=json", "--log-level=warn", "--debug", "--metrics-addr=:9101",
		"--metrics-label", "node=gpu-1", "--metrics-label=rack=r2", "gs://b", "mnt")
	require.NoError(t, err)
	wd, _ := os.Getwd()
	assert.Equal(t, &Config{
		Source: "gs://b", MountPoint: wd + "/mnt", Foreground: true, NonEmpty: true,
		Endpoint: "http://localhost:4443", Anonymous: true, KeyFile: key, BillingProject: "proj", MaxConnections: 64,
		StoreTimeout: 5 * time.Second, RetryMaxTime: 90 * time.Second,
		MetadataTTL: Forever, NegativeTTL: 0, Uid: 1000, Gid: 1001, FileMode: 0o640, DirMode: 0o750, AllowOther: true,
		CacheDir: wd + "/rel/cache", CacheSize: 200 << 30, CacheMinFreePercent: 10, CacheBlockSize: 1 << 20,
		MemoryLimit: 2 << 30, MetadataLimit: 1 << 30, ReadAheadKB: 0, MaxBackground: 256, KernelOptions: []string{"nodev", "noexec", "nosuid"},
		LogFile: "/var/log/ferry.log", LogFormat: "json", LogLevel: "warn", Debug: true, MetricsAddr: ":9101",
		MetricsLabels: [][2]string{{"node", "gpu-1"}, {"rack", "r2"}},
	}, cfg)

	cfg, err = parse(t, "--region=eu-west-1", "--s3-path-style", "s3://b/p/", "/m")
	require.NoError(t, err)
	assert.Equal(t, "eu-west-1", cfg.Region)
	assert.True(t, cfg.S3PathStyle)
	_, err = parse(t, "file:///data", "/m")
	require.NoError(t, err)

	// A value that starts with "-" is still the option's value.
	cfg, err = parse(t, "--metadata-ttl", "-1", "gs://b", "/m")
	require.NoError(t, err)
	assert.Equal(t, Forever, cfg.MetadataTTL)
}

func TestValidationNamesTheOption(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		option string // "" for errors about the positional arguments
		msg    string
	}{
		{[]string{"--cache-dir=/c", "--cache-size=12 parsecs"}, "cache-size", `--cache-size: "12 parsecs" is not a size (use e.g. 200GiB)`},
		{[]string{"--cache-dir=/c", "--cache-size=-5GiB"}, "cache-size", "negative"},
		{[]string{"--cache-size=200GiB"}, "cache-size", "--cache-size: needs --cache-dir"},
		{[]string{"--cache-min-free=1GiB"}, "cache-min-free", "needs --cache-dir"},
		{[]string{"--cache-dir=/c", "--cache-min-free=120%"}, "cache-min-free", "percentage"},
		{[]string{"--cache-dir=/c", "--cache-block-size=100KiB"}, "cache-block-size", "power of two"},
		{[]string{"--cache-dir=/c", "--cache-block-size=1GiB"}, "cache-block-size", "power of two"},
		{[]string{"--metadata-ttl=-2s"}, "metadata-ttl", "only -1 (forever)"},
		{[]string{"--negative-ttl=-5"}, "negative-ttl", "only -1"},
		{[]string{"--metadata-ttl=soon"}, "metadata-ttl", "not a duration"},
		{[]string{"--store-timeout=0"}, "store-timeout", "not a positive duration"},
		{[]string{"--store-timeout=-1"}, "store-timeout", "not a positive duration"},
		{[]string{"--retry-max-time=soon"}, "retry-max-time", "not a positive duration"},
		{[]string{"--memory-limit=1MiB"}, "memory-limit", "below the minimum of 32 MiB"},
		{[]string{"--memory-limit=1EiB"}, "memory-limit", "more than this machine"},
		{[]string{"--memory-limit=lots"}, "memory-limit", "not a size"},
		{[]string{"--metadata-limit=1MiB"}, "metadata-limit", "below the minimum of 4.0 MiB (0 is no bound)"},
		{[]string{"--cache-dir=/c", "--cache-block-size=16MiB", "--memory-limit=32MiB"}, "memory-limit", "below four readahead parts of 16 MiB"},
		{[]string{"--file-mode=0999"}, "file-mode", "not an octal mode"},
		{[]string{"--dir-mode=4755"}, "dir-mode", "beyond 0777"},
		{[]string{"--file-mode="}, "file-mode", "not an octal mode"},
		{[]string{"--log-format=xml"}, "log-format", `"xml" is not a log format`},
		{[]string{"--log-level=trace"}, "log-level", `"trace" is not a log level`},
		{[]string{"--metrics-label=node"}, "metrics-label", "not KEY=VALUE"},
		{[]string{"--metrics-label=1x=y"}, "metrics-label", "not KEY=VALUE"},
		{[]string{"--metrics-label=mountpoint=/x"}, "metrics-label", `label "mountpoint" is ferry's own`},
		{[]string{"--metrics-label=__name__=x"}, "metrics-label", "ferry's own or Prometheus's"},
		{[]string{"--metrics-label=a=1", "--metrics-label=a=2"}, "metrics-label", `label "a" is given twice`},
		{[]string{"--max-connections=0"}, "max-connections", "out of range"},
		{[]string{"--read-ahead-kb=-1"}, "read-ahead-kb", "out of range"},
		{[]string{"--max-background=2000"}, "max-background", "out of range"},
		{[]string{"--uid=root"}, "uid", "not a uid"},
		{[]string{"--gid=4294967295"}, "gid", "not a uid"},
		{[]string{"--endpoint=localhost:9000"}, "endpoint", "not an http(s) URL"},
		{[]string{"--metrics-addr=9101"}, "metrics-addr", "host:port"},
		{[]string{"--kernel-option=suidx"}, "kernel-option", "not a kernel mount option"},
		{[]string{"--ro=false"}, "ro", "always read-only"},
		{[]string{"--key-file=/nonexistent/key.json"}, "key-file", "cannot read key file"},
		{[]string{"--region=us-east-1"}, "region", "only applies to s3://"},
		{[]string{"--billing-project=p", "s3://b", "/m"}, "billing-project", "only applies to gs://"},
		{[]string{"--anonymous", "file:///d", "/m"}, "anonymous", "does not apply to file://"},
		{[]string{"gs://", "/m"}, "", "no bucket name"},
		{[]string{"http://b", "/m"}, "", `unknown scheme "http"`},
		{[]string{"bucket", "/m"}, "", "not a URL"},
		{[]string{"file://relative/dir", "/m"}, "", "absolute path"},
		{[]string{"gs://b"}, "", "need SOURCE and MOUNTPOINT"},
		{[]string{"gs://b", "/m", "extra"}, "", "need SOURCE and MOUNTPOINT"},
		{[]string{"--cache-dir=/m/cache", "gs://b", "/m"}, "cache-dir", "inside the mount point /m"},
		{[]string{"--cache-dir=/m", "gs://b", "/m/"}, "cache-dir", "inside the mount point /m"},
		{[]string{"--control-socket=/m/s.sock", "gs://b", "/m"}, "control-socket", "inside the mount point"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := tc.args
			if !slices.ContainsFunc(args, func(a string) bool { return !strings.HasPrefix(a, "--") }) {
				args = append(slices.Clone(args), "gs://b", "/m")
			}
			_, err := parse(t, args...)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.msg)
			assert.NotContains(t, err.Error(), "\n", "errors are one line")
			var oe *OptionError
			if tc.option == "" {
				assert.False(t, errors.As(err, &oe), "%v", err)
				assert.NotContains(t, err.Error(), "option", "an argument is not an option: %v", err)
				return
			}
			require.True(t, errors.As(err, &oe), "%v", err)
			assert.Equal(t, tc.option, oe.Option)
			assert.True(t, strings.HasPrefix(err.Error(), "--"+tc.option+": "), "%v", err)
		})
	}
}

func TestParseTTL(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"-1": Forever, "-1s": Forever, "0": 0, "0s": 0, "60": time.Minute, "60s": time.Minute,
		"1h30m": 90 * time.Minute, " 5s ": 5 * time.Second,
	} {
		got, err := ParseTTL(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "-2", "-1m", "1e3", "99999999999999999", "forever"} {
		_, err := ParseTTL(in)
		assert.Error(t, err, in)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"": 0, "0": 0, "4096": 4096, "128KiB": 128 << 10, "200GiB": 200 << 30, "200 GiB": 200 << 30,
		"1GB": 1e9, "1.5GiB": 3 << 29,
	} {
		got, err := ParseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"12 parsecs", "-1", "GiB", "1e30", "99999EiB"} {
		_, err := ParseSize(in)
		assert.Error(t, err, in)
	}
}

func TestCacheBudget(t *testing.T) {
	const total = 1000 << 30
	cfg := Config{CacheMinFree: 5 << 30}
	maxSize, minFree := cfg.CacheBudget(total)
	assert.Equal(t, int64(0), maxSize, "automatic: filecache decides")
	assert.Equal(t, int64(5<<30), minFree)

	cfg = Config{CacheSize: 200 << 30, CacheMinFreePercent: 10}
	maxSize, minFree = cfg.CacheBudget(total)
	assert.Equal(t, int64(200<<30), maxSize)
	assert.Equal(t, int64(100<<30), minFree)
}

// TestReadmeFlagSection fails when README.md's flag section does not match
// the table: run `go run ./flags/gendoc` from the repository root.
func TestReadmeFlagSection(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	want, err := UpdateSection(string(readme), Markdown())
	require.NoError(t, err)
	require.Equal(t, want, string(readme), "README.md flag section is stale: run `go run ./flags/gendoc`")
}

func TestMarkdownMentionsEveryOption(t *testing.T) {
	md := Markdown()
	for _, o := range Options {
		assert.Contains(t, md, "`"+o.Flag())
		assert.Contains(t, md, "`"+o.Fstab)
	}
	_, err := UpdateSection("no markers", md)
	assert.Error(t, err)
	got, err := UpdateSection("a\n"+BeginMarker+"\nold\n"+EndMarker+"\nb\n", "new\n")
	require.NoError(t, err)
	assert.Equal(t, "a\n"+BeginMarker+"\nnew\n"+EndMarker+"\nb\n", got)
}

func TestResolvePath(t *testing.T) {
	d := t.TempDir()
	real := filepath.Join(d, "real")
	require.NoError(t, os.MkdirAll(filepath.Join(real, "mnt"), 0o755))
	require.NoError(t, os.Symlink(real, filepath.Join(d, "alias")))
	require.NoError(t, os.Symlink("real/mnt", filepath.Join(d, "mntlink")))
	real, err := filepath.EvalSymlinks(real) // t.TempDir may sit behind a link
	require.NoError(t, err)

	assert.Equal(t, filepath.Join(real, "mnt"), resolvePath(filepath.Join(d, "mntlink")), "a link as the last component")
	assert.Equal(t, filepath.Join(real, "mnt"), resolvePath(filepath.Join(d, "alias", "mnt")), "a link above")
	assert.Equal(t, filepath.Join(real, "not", "yet"), resolvePath(filepath.Join(d, "alias", "not", "yet")), "parts that do not exist yet")
	loop := filepath.Join(d, "loop")
	require.NoError(t, os.Symlink(loop, loop))
	assert.Equal(t, loop, resolvePath(loop), "a loop ends")

	// A cache dir reached through an alias of the mount point is inside it.
	_, err = parse(t, "--cache-dir="+filepath.Join(d, "alias", "mnt", "c"), "gs://b", filepath.Join(d, "mntlink"))
	assert.ErrorContains(t, err, "inside the mount point")
	cfg, err := parse(t, "--cache-dir="+filepath.Join(d, "alias", "cache"), "gs://b", filepath.Join(d, "mntlink"))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(real, "mnt"), cfg.MountPoint)
}

func TestWithin(t *testing.T) {
	assert.True(t, within("/m", "/m"))
	assert.True(t, within("/m/c", "/m"))
	assert.False(t, within("/mnt", "/m"))
	assert.False(t, within("/m2/c", "/m"))
	assert.False(t, within("/", "/m"))
	assert.True(t, within("/m/..c", "/m"), "a name that starts with .. is still below")
}

// TestFuseFDMountPoint: /dev/fd/N, a /dev/fuse mounted by a helper, is
// kept as given (not resolved through /proc/self/fd) and runs in the
// foreground, where the descriptor is.
func TestFuseFDMountPoint(t *testing.T) {
	cfg, err := parse(t, "gs://b", "/dev/fd/3")
	require.NoError(t, err)
	assert.Equal(t, "/dev/fd/3", cfg.MountPoint)
	assert.True(t, cfg.Foreground)
	fd, ok := FuseFD(cfg.MountPoint)
	assert.True(t, ok)
	assert.Equal(t, 3, fd)
	for _, bad := range []string{"/dev/fd/x", "/dev/fd/-1", "/dev/fd/03", "/dev/fd/"} {
		_, ok := FuseFD(bad)
		assert.False(t, ok, bad)
		_, err := parse(t, "gs://b", bad)
		assert.ErrorContains(t, err, "use /dev/fd/N with N a descriptor number", bad)
	}
}
