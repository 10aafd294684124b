package daemon

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/flags"
)

func registry() *prometheus.Registry {
	reg, _ := newRegistry(&flags.Config{})
	return reg
}

// TestMountLabels: every series, ferry's and the runtime's, carries the
// mount's labels and --metrics-label's.
func TestMountLabels(t *testing.T) {
	cfg := &flags.Config{Source: "gs://b/train", MountPoint: "/mnt/data", MetricsLabels: [][2]string{{"node", "gpu-1"}}}
	reg, labelled := newRegistry(cfg)
	labelled.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_test_total", Help: "x"}))
	fams, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			assert.Equal(t, "gs://b/train", got["source"], f.GetName())
			assert.Equal(t, "/mnt/data", got["mountpoint"], f.GetName())
			assert.Equal(t, "gpu-1", got["node"], f.GetName())
		}
	}
	assert.True(t, names["ferry_test_total"])
	assert.True(t, names["go_goroutines"])
	assert.True(t, names["process_resident_memory_bytes"] || len(names) > 2)
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

// TestMetricsServer: /metrics always; profiles only with --debug on a
// loopback address; a busy port is an error naming the option.
func TestMetricsServer(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	_, err = serveMetrics(&flags.Config{MetricsAddr: busy.Addr().String()}, registry(), log)
	var oe *flags.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "metrics-addr", oe.Option)

	stop, err := serveMetrics(&flags.Config{}, registry(), log)
	require.NoError(t, err, "no --metrics-addr: nothing to serve")
	stop()

	for _, debug := range []bool{false, true} {
		addr := freeAddr(t)
		stop, err := serveMetrics(&flags.Config{MetricsAddr: addr, Debug: debug}, registry(), log)
		require.NoError(t, err)
		code, body := get(t, "http://"+addr+"/metrics")
		assert.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, "\n# TYPE go_goroutines gauge\n")
		assert.Contains(t, body, "\n# TYPE process_cpu_seconds_total counter\n")
		code, _ = get(t, "http://"+addr+"/debug/pprof/")
		if debug {
			assert.Equal(t, http.StatusOK, code, "profiles with --debug on loopback")
		} else {
			assert.Equal(t, http.StatusNotFound, code, "no profiles without --debug")
		}
		stop()
		_, err = net.Dial("tcp", addr)
		assert.Error(t, err, "stopped")
	}
}

// freeAddr is a loopback address with a port that was free just now.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}
