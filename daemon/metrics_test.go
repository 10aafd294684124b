package daemon

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/flags"
)

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
	_, err = serveMetrics(&flags.Config{MetricsAddr: busy.Addr().String()}, newRegistry(), log)
	var oe *flags.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "metrics-addr", oe.Option)

	stop, err := serveMetrics(&flags.Config{}, newRegistry(), log)
	require.NoError(t, err, "no --metrics-addr: nothing to serve")
	stop()

	for _, debug := range []bool{false, true} {
		addr := freeAddr(t)
		stop, err := serveMetrics(&flags.Config{MetricsAddr: addr, Debug: debug}, newRegistry(), log)
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
