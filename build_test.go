package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jacobsa/fuse"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"ferry/bucket/emulator"
	"ferry/daemon"
	"ferry/flags"
)

// TestLimitHeap: the runtime's memory limit is --memory-limit plus 192
// MiB, or plus the metadata limit less the overhead if more, or
// GOMEMLIMIT's; buffers mapped outside the heap lower it by as much, never
// below the overhead.
func TestLimitHeap(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	log := slog.New(slog.DiscardHandler)
	const mib = 1 << 20

	t.Setenv("GOMEMLIMIT", "")
	assert.Nil(t, limitHeap(0, 0, log), "no budget, no GOMEMLIMIT: nothing to keep")

	offHeap := limitHeap(512*mib, 128*mib, log)
	require.NotNil(t, offHeap)
	assert.EqualValues(t, 672*mib, debug.SetMemoryLimit(-1))
	offHeap(100 * mib)
	assert.EqualValues(t, 572*mib, debug.SetMemoryLimit(-1))
	offHeap(2048 * mib)
	assert.EqualValues(t, heapOverhead, debug.SetMemoryLimit(-1), "never below the overhead")
	offHeap(0)
	assert.EqualValues(t, 672*mib, debug.SetMemoryLimit(-1))
	limitHeap(512*mib, 0, log)
	assert.EqualValues(t, 672*mib, debug.SetMemoryLimit(-1), "unbounded metadata: the default assumed")
	limitHeap(512*mib, 256*mib, log)
	assert.EqualValues(t, 512*mib+256*mib, 96*mib+debug.SetMemoryLimit(-1), "the defaults: 256 MiB over, 96 of it outside the runtime's limit")
	limitHeap(512*mib, 1024*mib, log)
	assert.EqualValues(t, 1440*mib, debug.SetMemoryLimit(-1), "a larger metadata limit raises it")

	// GOMEMLIMIT (read by the runtime at start) wins, and is lowered too.
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetMemoryLimit(1024 * mib)
	offHeap = limitHeap(512*mib, 128*mib, log)
	require.NotNil(t, offHeap)
	assert.EqualValues(t, 1024*mib, debug.SetMemoryLimit(-1))
	offHeap(256 * mib)
	assert.EqualValues(t, 768*mib, debug.SetMemoryLimit(-1))
}

// parseConfig runs the real flag parsing on ferry-style arguments.
func parseConfig(t *testing.T, args ...string) *flags.Config {
	t.Helper()
	var cfg *flags.Config
	app := &cli.App{Flags: flags.CLIFlags(), Action: func(c *cli.Context) (err error) {
		cfg, err = flags.FromContext(c)
		return err
	}}
	args, err := permuteArgs(args)
	require.NoError(t, err)
	require.NoError(t, app.Run(append([]string{"ferry"}, args...)))
	return cfg
}

// TestMetricsNamesLint mounts in this process with a disk cache, scrapes
// /metrics and checks that every family follows the Prometheus naming
// conventions (promlint) and that the families operators need are there.
func TestMetricsNamesLint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	src, mnt, cache := t.TempDir(), t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "f"), []byte("data"), 0o644))
	port, err := emulator.FreePort()
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	cfg := parseConfig(t, "--foreground", "--cache-dir", cache, "--metrics-addr", addr,
		"--control-socket", sock, "file://"+src, mnt)

	ready := make(chan struct{})
	served := make(chan error, 1)
	go func() {
		served <- daemon.Serve(cfg, slog.New(slog.DiscardHandler), mountStack, func() { close(ready) })
	}()
	select {
	case <-ready:
	case err := <-served:
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("mount not ready")
	}
	t.Cleanup(func() {
		for range 50 {
			if err := fuse.Unmount(mnt); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		select {
		case err := <-served:
			assert.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("serve did not return after unmount")
		}
		_, err := os.Stat(sock)
		assert.True(t, os.IsNotExist(err), "the control socket is removed at exit")
	})

	fi, err := os.Stat(sock)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "control socket mode")

	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	body := string(b)
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)
	for _, name := range []string{
		// FUSE
		"ferry_fuse_ops_total", "ferry_fuse_op_duration_seconds", "ferry_fs_inodes",
		// disk cache
		"ferry_cache_hits_total", "ferry_cache_misses_total", "ferry_cache_hits_bytes_total",
		"ferry_cache_misses_bytes_total", "ferry_cache_evictions_total", "ferry_cache_evicted_unread_bytes_total",
		"ferry_cache_corrupt_blocks_total",
		"ferry_cache_used_bytes", "ferry_cache_limit_bytes",
		// readahead
		"ferry_readahead_budget_bytes", "ferry_readahead_budget_limit_bytes", "ferry_readahead_budget_peak_bytes",
		"ferry_readahead_dropped_total", "ferry_readahead_window_bytes",
		"ferry_readahead_mapped_bytes", "ferry_readahead_mapped_free_bytes",
		// store (the mount's probe made a request)
		"ferry_store_requests_total", "ferry_store_request_duration_seconds", "ferry_store_read_bytes_total",
		// a file:// source
		"ferry_file_hidden_links_total",
	} {
		assert.Contains(t, body, "\n# TYPE "+name+" ", name)
	}
}
