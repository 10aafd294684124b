package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/tools/bench/netem"
)

func TestParseClusterArgs(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseClusterArgs(nil, &stderr)
	require.NoError(t, err)
	assert.Equal(t, 3, o.Nodes)
	assert.Equal(t, int64(1<<30), int64(o.Files)*o.FileSize, "the issue's 1 GiB dataset")
	assert.Equal(t, "60s", o.CacheWait, "docs/scale-out.md's recipe unless asked")

	o, err = parseClusterArgs([]string{"--nodes", "4", "--cache-wait", "default", "--tier-ferry-args", "--max-connections 8"}, &stderr)
	require.NoError(t, err)
	assert.Equal(t, 4, o.Nodes)
	assert.Equal(t, "default", o.CacheWait)
	assert.Equal(t, []string{"--max-connections", "8"}, o.TierArgs)

	for _, bad := range [][]string{
		{"--nodes", "1"},
		{"--cache-wait", "soon"},
		{"--cache-wait", ""},
		{"--cache-wait", "-1s"},
		{"--ferry-args", "--endpoint=http://x"},
		{"--tier-ferry-args", "--cache-dir /x"},
		{"extra"},
	} {
		_, err := parseClusterArgs(bad, &stderr)
		assert.Error(t, err, "%q", bad)
	}
}

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		h        string
		off, len int64
	}{
		{"bytes=0-4194303", 0, 4 << 20},
		{"bytes=10-", 10, -1},
		{"", 0, -1},
		{"bytes=5-1", 0, -1},
		{"bytes=0-1,5-6", 0, -1},
		{"items=0-1", 0, -1},
	} {
		off, n := parseRange(tc.h)
		assert.Equal(t, [2]int64{tc.off, tc.len}, [2]int64{off, n}, "%q", tc.h)
	}
}

func TestUnionLen(t *testing.T) {
	// ..XXXX....   [2, 6)
	// ....XXXX..   [4, 8): overlaps 2
	// XX........   [0, 2): touches
	assert.Equal(t, int64(8), unionLen([][2]int64{{2, 6}, {4, 8}, {0, 2}}))
	assert.Equal(t, int64(4), unionLen([][2]int64{{0, 4}, {1, 2}}), "contained")
	assert.Equal(t, int64(0), unionLen(nil))
}

// TestTracedLink checks that the traced proxy forwards bytes unchanged
// and records what a summary needs: the range asked, the bytes sent, and
// bytes served twice.
func TestTracedLink(t *testing.T) {
	body := strings.Repeat("x", 1000)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		off, n := parseRange(r.Header.Get("Range"))
		if n < 0 {
			n = int64(len(body)) - off
		}
		_, _ = io.WriteString(w, body[off:off+n])
	}))
	defer origin.Close()
	p, err := netem.New(origin.URL, netem.Link{}, nil)
	require.NoError(t, err)
	l, err := serveTraced(p, time.Now())
	require.NoError(t, err)
	defer l.Close()

	get := func(rng string) string {
		req, err := http.NewRequest(http.MethodGet, "http://"+l.Addr+"/b/obj", nil)
		require.NoError(t, err)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	m := l.mark()
	assert.Equal(t, body[:100], get("bytes=0-99"))
	assert.Equal(t, body[50:150], get("bytes=50-149"))
	assert.Len(t, get(""), 1000)

	// A request is logged when its handler returns, which may be after
	// the client has read the whole body.
	require.Eventually(t, func() bool { return len(l.since(m)) == 3 }, 5*time.Second, time.Millisecond)
	log := l.since(m)
	require.Len(t, log, 3)
	assert.Equal(t, "/b/obj", log[0].Object)
	assert.Equal(t, int64(50), log[1].Offset)
	assert.Equal(t, int64(100), log[1].Asked)
	assert.Equal(t, int64(-1), log[2].Asked)
	s := summarize(log)
	assert.Equal(t, int64(3), s.Requests)
	assert.Equal(t, int64(1200), s.Bytes)
	assert.Equal(t, int64(1000), s.Distinct, "200 bytes were served twice")
	assert.Equal(t, map[string]int64{"100": 2, "to end": 1}, s.Sizes)
	assert.Less(t, s.Max, time.Second.Seconds())
	assert.Zero(t, s.Slow)
}

// TestClusterTargets checks the targets' arithmetic on made-up rows.
func TestClusterTargets(t *testing.T) {
	rep := &ClusterReport{Options: ClusterOptions{Nodes: 3}, DatasetBytes: 1000}
	row := func(setup, phase string, node int, bytes int64, secs float64, origin int64) ClusterRow {
		return ClusterRow{Setup: setup, Phase: phase, Node: node, Bytes: bytes, Seconds: secs, OriginBytes: origin}
	}
	rep.Rows = []ClusterRow{
		row(SetupOrigin, PhaseCold, 1, 1000, 10, 1000),   // 100 B/s
		row(SetupOrigin, PhaseCold, 2, 1000, 8, 1000),    // 125 B/s
		row(SetupOrigin, PhaseCold, 3, 1000, 12.5, 1000), // 80 B/s: the median is 100
		row(SetupTier, PhaseCold, 1, 1000, 12.5, 1050),   // 80 B/s: 80% of node 1
		row(SetupTier, PhaseWarm, 1, 1000, 1, 0),
		row(SetupTier, PhaseCold, 2, 1000, 2, 0), // 500 B/s
		row(SetupTier, PhaseCold, 3, 1000, 4, 0), // 250 B/s: 62% of the reference
		row(SetupTier, PhaseCold, 4, 1000, 2.5, 100),
	}
	rep.derive()
	require.Len(t, rep.Targets, 3)
	assert.False(t, rep.Targets[0].Met, "1150 origin bytes for a dataset of 1000: 1.15 x, over 1.10")
	assert.Contains(t, rep.Targets[0].Got, "1.15 x")
	assert.False(t, rep.Targets[1].Met, "node 3 is below 80%")
	assert.Contains(t, rep.Targets[1].Got, "node 2 125%, node 3 62%")
	assert.True(t, rep.Targets[2].Met)
	assert.Contains(t, rep.Targets[2].Got, "80% (")
	assert.Contains(t, rep.Targets[2].Got, "64% to 100% of their spread")

	rep.Rows[0].Seconds = 20 // no-tier node 1 at 50 B/s: the median is 80
	rep.derive()
	assert.Contains(t, rep.Targets[2].Got, "100% (", "the median, not node 1 alone (160%)")
}
