package control

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSnapshot: the stats op answers ferry's counters and gauges without
// the labels every series has; other families and histograms are left
// out.
func TestSnapshot(t *testing.T) {
	reg := prometheus.NewRegistry()
	labelled := prometheus.WrapRegistererWith(prometheus.Labels{"mountpoint": "/mnt/x", "source": "gs://b"}, reg)
	ops := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_fuse_ops_total", Help: "x"}, []string{"op"})
	ops.WithLabelValues("open").Add(3)
	budget := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ferry_readahead_budget_bytes", Help: "x"})
	budget.Set(42)
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ferry_store_request_duration_seconds", Help: "x"})
	hist.Observe(1)
	labelled.MustRegister(ops, budget, hist, prometheus.NewCounter(prometheus.CounterOpts{Name: "other_total", Help: "x"}))

	got, err := snapshot(reg, map[string]bool{"mountpoint": true, "source": true})
	require.NoError(t, err)
	assert.ElementsMatch(t, []series{
		{Name: "ferry_fuse_ops_total", Labels: map[string]string{"op": "open"}, Value: 3},
		{Name: "ferry_readahead_budget_bytes", Value: 42},
	}, got)
}

// TestSample: rates from two snapshots, the hit ratio with passthrough
// counted, open files from opens, failed opens and releases.
func TestSample(t *testing.T) {
	t0 := time.Unix(100, 0)
	s := func(name string, v float64, kv ...string) series {
		l := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			l[kv[i]] = kv[i+1]
		}
		return series{Name: name, Labels: l, Value: v}
	}
	a := counters{at: t0, series: []series{
		s("ferry_readahead_read_bytes_total", 1000),
		s("ferry_store_requests_total", 10, "op", "read"), s("ferry_store_requests_total", 5, "op", "stat"),
		s("ferry_cache_hits_bytes_total", 0), s("ferry_cache_misses_bytes_total", 0),
		s("ferry_fs_passthrough_opened_bytes_total", 0),
		s("ferry_fuse_errors_total", 4, "op", "lookup", "errno", "ENOENT"),
	}}
	b := counters{at: t0.Add(2 * time.Second), series: []series{
		s("ferry_readahead_read_bytes_total", 5000),
		s("ferry_store_requests_total", 20, "op", "read"), s("ferry_store_requests_total", 7, "op", "stat"),
		s("ferry_store_read_bytes_total", 800),
		s("ferry_cache_hits_bytes_total", 300), s("ferry_cache_misses_bytes_total", 200),
		s("ferry_fs_passthrough_opened_bytes_total", 500),
		s("ferry_readahead_budget_bytes", 64), s("ferry_readahead_budget_limit_bytes", 256),
		s("ferry_fuse_ops_total", 10, "op", "open"), s("ferry_fuse_ops_total", 6, "op", "release"),
		s("ferry_fuse_errors_total", 1, "op", "open", "errno", "EIO"),
		s("ferry_fuse_errors_total", 9, "op", "lookup", "errno", "ENOENT"),
		s("ferry_fuse_errors_total", 1, "op", "flush", "errno", "ENOSYS"),
		s("ferry_store_errors_total", 4, "op", "read", "kind", "unavailable"),
		s("ferry_store_errors_total", 6, "op", "stat", "kind", "not_found"),
	}}
	got := sample("/mnt/x", a, b)
	assert.Equal(t, 2.0, got.Interval)
	assert.Equal(t, 2000.0, got.ReadBytesPerSec)
	assert.Equal(t, 6.0, got.StoreRequestsPerSec)
	assert.Equal(t, 400.0, got.StoreBytesPerSec)
	require.NotNil(t, got.CacheHitRatio)
	assert.InDelta(t, 1-400.0/2250, *got.CacheHitRatio, 1e-9, "400 B/s from the store of 2000 read and 250 passthrough")
	assert.Equal(t, 0.25, got.BudgetBytes/got.BudgetLimitBytes)
	assert.Equal(t, 3.0, got.OpenFiles, "10 opens, 1 failed, 6 released")
	assert.Equal(t, 0.5, got.ErrorsPerSec, "EIO only: not ENOENT, not ENOSYS")
	assert.Equal(t, 2.0, got.StoreErrorsPerSec, "not found is no store error")
	assert.Nil(t, sample("/mnt/x", b, b).CacheHitRatio, "nothing read: no ratio")

	line := got.line()
	assert.True(t, strings.HasPrefix(line, "    2.0KiB"), line)
	assert.Contains(t, line, " 82.2 ")
	assert.Contains(t, line, "25% of 256B")
}
