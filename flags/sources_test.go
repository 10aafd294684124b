package flags

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeConfig writes a config file and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ferry.yaml")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

// TestConfigPrecedence: the command line wins over FERRY_ variables,
// which win over the file, which wins over the default.
func TestConfigPrecedence(t *testing.T) {
	file := writeConfig(t, `
metadata-ttl: -1
negative-ttl: 1m
memory-limit: 256MiB
max-connections: 8
anonymous: true
kernel-option: [noexec, noatime]
metrics-label:
  - node=gpu-1
file_mode: "0440"   # the fstab spelling works too
`)
	t.Setenv("FERRY_NEGATIVE_TTL", "7s")
	t.Setenv("FERRY_MEMORY_LIMIT", "128MiB")
	t.Setenv("FERRY_MAX_CONNECTIONS", "16")
	cfg, err := parse(t, "--config-file", file, "--max-connections", "4", "gs://b", "/m")
	require.NoError(t, err)
	assert.Equal(t, Forever, cfg.MetadataTTL, "from the file")
	assert.Equal(t, 7*time.Second, cfg.NegativeTTL, "the environment over the file")
	assert.Equal(t, int64(128<<20), cfg.MemoryLimit, "the environment over the file")
	assert.Equal(t, 4, cfg.MaxConnections, "the command line over both")
	assert.True(t, cfg.Anonymous)
	assert.Equal(t, []string{"noexec", "noatime"}, cfg.KernelOptions)
	assert.Equal(t, [][2]string{{"node", "gpu-1"}}, cfg.MetricsLabels)
	assert.Equal(t, os.FileMode(0o440), cfg.FileMode)
	assert.Equal(t, 20*time.Second, cfg.StoreTimeout, "the default")

	// A list from the environment is comma-separated; the command line
	// replaces it whole.
	t.Setenv("FERRY_KERNEL_OPTION", "nodev, noexec")
	cfg, err = parse(t, "--config-file", file, "gs://b", "/m")
	require.NoError(t, err)
	assert.Equal(t, []string{"nodev", "noexec"}, cfg.KernelOptions)
	cfg, err = parse(t, "--config-file", file, "--kernel-option", "nosuid", "gs://b", "/m")
	require.NoError(t, err)
	assert.Equal(t, []string{"nosuid"}, cfg.KernelOptions)

	// A switch set true in the file is turned off from the command line.
	cfg, err = parse(t, "--config-file", file, "--anonymous=false", "gs://b", "/m")
	require.NoError(t, err)
	assert.False(t, cfg.Anonymous)

	// FERRY_CONFIG_FILE names the file when the command line does not.
	t.Setenv("FERRY_CONFIG_FILE", file)
	cfg, err = parse(t, "gs://b", "/m")
	require.NoError(t, err)
	assert.Equal(t, Forever, cfg.MetadataTTL)
	assert.Equal(t, file, cfg.ConfigFile)
}

// TestConfigSourcesCountAsSet: rules about options given together see
// the environment and the file as the command line.
func TestConfigSourcesCountAsSet(t *testing.T) {
	t.Setenv("FERRY_CACHE_SIZE", "10GiB")
	_, err := parse(t, "gs://b", "/m")
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "--cache-size: needs --cache-dir")

	file := writeConfig(t, "region: eu-west-1\n")
	_, err = parse(t, "--config-file", file, "--cache-dir", "/c", "gs://b", "/m")
	assert.ErrorContains(t, err, "--region: only applies to s3://")
}

// TestConfigErrorsNameTheSource: a bad value gets the flag's own message,
// with where it came from; an unknown variable or key is an error naming
// it.
func TestConfigErrorsNameTheSource(t *testing.T) {
	t.Run("env value", func(t *testing.T) {
		t.Setenv("FERRY_CACHE_BLOCK_SIZE", "100KiB")
		_, err := parse(t, "--cache-dir", "/c", "gs://b", "/m")
		require.ErrorIs(t, err, ErrInvalid)
		_, flagErr := parse(t, "--cache-dir", "/c", "--cache-block-size", "100KiB", "gs://b", "/m")
		assert.Equal(t, strings.Replace(flagErr.Error(), "--cache-block-size:", "--cache-block-size (FERRY_CACHE_BLOCK_SIZE):", 1), err.Error())
	})
	t.Run("env switch", func(t *testing.T) {
		t.Setenv("FERRY_ALLOW_OTHER", "maybe")
		_, err := parse(t, "gs://b", "/m")
		assert.EqualError(t, err, `--allow-other (FERRY_ALLOW_OTHER): "maybe" is not true or false`)
	})
	t.Run("env unknown", func(t *testing.T) {
		t.Setenv("FERRY_CACHE_DIRECTORY", "/c")
		_, err := parse(t, "gs://b", "/m")
		require.ErrorIs(t, err, ErrInvalid)
		assert.Contains(t, err.Error(), "environment variable FERRY_CACHE_DIRECTORY names no option")
	})
	for _, tc := range []struct{ name, text, want string }{
		{"unknown key", "cache-dir: /c\ncache-dri: /d\n", `line 2: unknown key "cache-dri"`},
		{"bad value", "metadata-ttl: soon\n", `--metadata-ttl (config file PATH): "soon" is not a duration`},
		{"not a mapping", "- cache-dir\n", "want a mapping"},
		{"nested", "cache-dir:\n  path: /c\n", "line 2: cache-dir: want one value"},
		{"twice", "cache-dir: /c\ncache_dir: /d\n", "line 2: cache-dir is set twice"},
		{"itself", "config-file: /x\n", "config-file cannot be set in a config file"},
		{"syntax", "cache-dir: [\n", "--config-file: PATH: yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeConfig(t, tc.text)
			_, err := parse(t, "--config-file", p, "gs://b", "/m")
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), strings.ReplaceAll(tc.want, "PATH", p))
		})
	}
	_, err := parse(t, "--config-file", "/nonexistent/ferry.yaml", "gs://b", "/m")
	assert.ErrorContains(t, err, "--config-file: open /nonexistent/ferry.yaml")

	// An empty file is no error.
	_, err = parse(t, "--config-file", writeConfig(t, "# nothing yet\n"), "gs://b", "/m")
	assert.NoError(t, err)
}

// TestEnvNames: every option has its variable, and none is reserved.
func TestEnvNames(t *testing.T) {
	o, _ := Lookup("cache-min-free")
	assert.Equal(t, "FERRY_CACHE_MIN_FREE", o.Env())
	for i := range Options {
		assert.NotContains(t, reservedEnv, Options[i].Env())
		assert.Same(t, &Options[i], envOption(Options[i].Env()))
	}
}

// TestEnvNamesInRepo: every FERRY_ name the repository uses (the
// systemd unit's, the tests', CI's) is an option's or reserved, so that
// none makes ferry refuse to start where it is set.
func TestEnvNamesInRepo(t *testing.T) {
	re := regexp.MustCompile(`FERRY_[A-Z0-9_]*[A-Z0-9]`)
	seen := map[string]string{}
	err := filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "third_party" || d.Name() == ".git" || p == filepath.Join("..", "docs", "bench")) {
			return filepath.SkipDir
		}
		if d.IsDir() || strings.HasSuffix(p, "_test.go") && strings.Contains(p, "flags/") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, n := range re.FindAllString(string(b), -1) {
			seen[n] = p
		}
		return nil
	})
	require.NoError(t, err)
	for n, p := range seen {
		reserved := slices.Contains(reservedEnv, n) || slices.ContainsFunc(reservedEnvPrefixes, func(pre string) bool { return strings.HasPrefix(n, pre) })
		if !reserved && envOption(n) == nil && !slices.ContainsFunc(reservedEnvPrefixes, func(pre string) bool { return pre == n+"_" }) {
			t.Errorf("%s (in %s) is neither an option's variable nor reserved", n, p)
		}
	}
}
