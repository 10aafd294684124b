package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStatsJSON: `ferry stats --json MOUNT` asks the daemon over its
// control socket and prints one sample of what the mount did meanwhile.
func TestStatsJSON(t *testing.T) {
	s := newStore(t, "gcs")
	const files = 6
	for i := range files {
		s.put(t, fmt.Sprintf("big%d", i), content("big", 16<<20))
	}
	m := mount(t, s, "--cache-dir", t.TempDir(), "--memory-limit", "256MiB")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		// Keeps reading while stats samples: from the store first, once
		// stats has taken its first sample (a file read whole before
		// that would make no store request in the sample), then from
		// the cache.
		defer wg.Done()
		time.Sleep(300 * time.Millisecond)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = os.ReadFile(filepath.Join(m.dir, fmt.Sprintf("big%d", i%files)))
			dropCaches(t)
		}
	}()
	out, errOut, code := ferryCmd(t, "", "stats", "--json", "--interval", "2s", m.dir)
	close(stop)
	wg.Wait()
	require.Zero(t, code, "%s", errOut)

	var got struct {
		MountPoint          string   `json:"mountpoint"`
		Interval            float64  `json:"interval_seconds"`
		ReadBytesPerSec     float64  `json:"read_bytes_per_second"`
		StoreRequestsPerSec float64  `json:"store_requests_per_second"`
		StoreBytesPerSec    float64  `json:"store_bytes_per_second"`
		CacheHitRatio       *float64 `json:"cache_hit_ratio"`
		BudgetLimitBytes    float64  `json:"budget_limit_bytes"`
		CacheLimitBytes     float64  `json:"cache_limit_bytes"`
		OpenFiles           *float64 `json:"open_files"`
		ErrorsPerSec        float64  `json:"errors_per_second"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	assert.Equal(t, m.dir, got.MountPoint)
	assert.InDelta(t, 2, got.Interval, 1)
	assert.Greater(t, got.ReadBytesPerSec, 0.0, "reads went on during the sample:\n%s", out)
	assert.Greater(t, got.StoreRequestsPerSec, 0.0, out)
	assert.Equal(t, float64(256<<20), got.BudgetLimitBytes)
	assert.Greater(t, got.CacheLimitBytes, 0.0)
	require.NotNil(t, got.CacheHitRatio, out)
	assert.NotNil(t, got.OpenFiles)
	assert.Zero(t, got.ErrorsPerSec)

	// The table: a header, then one line per sample.
	out, errOut, code = ferryCmd(t, "", "stats", "--count", "2", "--interval", "100ms", m.dir)
	require.Zero(t, code, "%s", errOut)
	assert.Regexp(t, `^ +read/s +store req/s.*\n( +\S+.*\n){2}$`, out)

	_, errOut, code = ferryCmd(t, "", "stats", t.TempDir())
	assert.Equal(t, 32, code)
	assert.Contains(t, errOut, "not on a ferry mount")
}

// TestBuildInfoAndMountLabels: ferry_build_info says which build serves
// the mount, as `ferry version` does, and every series names the mount
// and carries --metrics-label's labels.
func TestBuildInfoAndMountLabels(t *testing.T) {
	s := newStore(t, "file")
	s.put(t, "f", []byte("x"))
	m := mount(t, s, "--metrics-addr", freeAddr(t), "--metrics-label", "node=gpu-7")
	out, _, code := ferryCmd(t, "", "version")
	require.Zero(t, code)
	v := regexp.MustCompile(`^ferry (\S+) \(revision (\S+), (\S+)\)\n$`).FindStringSubmatch(out)
	require.NotNil(t, v, out)
	labels := map[string]string{"version": v[1], "revision": v[2], "goversion": v[3],
		"source": s.url, "mountpoint": m.dir, "node": "gpu-7"}
	assert.Equal(t, 1.0, m.metric(t, "ferry_build_info", labels), "ferry_build_info%v", labels)

	_, err := os.ReadFile(filepath.Join(m.dir, "f"))
	require.NoError(t, err)
	mount := map[string]string{"source": s.url, "mountpoint": m.dir, "node": "gpu-7"}
	assert.Positive(t, m.metric(t, "ferry_fuse_ops_total", mount))
	assert.Positive(t, m.metric(t, "process_resident_memory_bytes", mount))
}
