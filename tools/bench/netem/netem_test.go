package netem

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock advances only when the proxy sleeps, so pacing is exact and
// no test waits for real.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept time.Duration // GUARDED_BY(mu)
	naps  int           // GUARDED_BY(mu)
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.now = c.now.Add(d)
		c.slept += d
		c.naps++
	}
	return ctx.Err()
}

func (c *fakeClock) total() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slept
}

// origin serves a fixed body and records the Host header it saw.
func origin(t *testing.T, body []byte) (*httptest.Server, *string) {
	var host string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		host = r.Host
		mu.Unlock()
		w.Header().Set("X-Origin", "yes")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv, &host
}

func startProxy(t *testing.T, target string, link Link, clock Clock) *Server {
	p, err := New(target, link, clock)
	require.NoError(t, err)
	s, err := Serve(p, "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func get(t *testing.T, client *http.Client, addr string) []byte {
	resp, err := client.Get("http://" + addr + "/obj")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "yes", resp.Header.Get("X-Origin"))
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return b
}

func TestForwardsBytesAndHostUnchanged(t *testing.T) {
	body := make([]byte, 1<<20+17)
	_, _ = rand.Read(body)
	o, host := origin(t, body)
	s := startProxy(t, o.URL, Link{}, &fakeClock{})

	got := get(t, http.DefaultClient, s.Addr)
	assert.True(t, bytes.Equal(body, got), "body changed in transit")
	assert.Equal(t, s.Addr, *host, "Host header must be the one the client used")
	c := s.Counters()
	assert.EqualValues(t, 1, c.Requests)
	assert.EqualValues(t, len(body), c.BytesServed)
}

func TestRTTIsAddedOncePerRequest(t *testing.T) {
	o, _ := origin(t, []byte("x"))
	clock := &fakeClock{}
	s := startProxy(t, o.URL, Link{RTT: 30 * time.Millisecond}, clock)
	for range 5 {
		get(t, http.DefaultClient, s.Addr)
	}
	assert.Equal(t, 150*time.Millisecond, clock.total())
	assert.EqualValues(t, 5, s.Counters().Requests)
}

func TestPerConnectionCap(t *testing.T) {
	const size = 10 << 20
	o, _ := origin(t, make([]byte, size))
	clock := &fakeClock{}
	s := startProxy(t, o.URL, Link{PerConn: 1 << 20}, clock)
	get(t, http.DefaultClient, s.Addr)
	// 10 MiB at 1 MiB/s, less the one chunk the limiter's burst allows.
	want := time.Duration(float64(size-chunk) / float64(1<<20) * float64(time.Second))
	assert.InDelta(t, want.Seconds(), clock.total().Seconds(), 0.01)
}

func TestEachConnectionHasItsOwnCap(t *testing.T) {
	const size = 4 << 20
	o, _ := origin(t, make([]byte, size))
	clock := &fakeClock{}
	s := startProxy(t, o.URL, Link{PerConn: 1 << 20}, clock)
	// Two clients, two connections: the second starts with a full bucket
	// of its own and is paced independently of the first.
	for range 2 {
		c := &http.Client{Transport: &http.Transport{}}
		get(t, c, s.Addr)
		c.CloseIdleConnections()
	}
	want := 2 * time.Duration(float64(size-chunk)/float64(1<<20)*float64(time.Second))
	assert.InDelta(t, want.Seconds(), clock.total().Seconds(), 0.01)
	assert.EqualValues(t, 2, s.Counters().Connections)
}

func TestTotalCapBindsWhenTighter(t *testing.T) {
	const size = 8 << 20
	o, _ := origin(t, make([]byte, size))
	clock := &fakeClock{}
	s := startProxy(t, o.URL, Link{PerConn: 100 << 20, Total: 2 << 20}, clock)
	get(t, http.DefaultClient, s.Addr)
	want := time.Duration(float64(size-chunk) / float64(2<<20) * float64(time.Second))
	assert.InDelta(t, want.Seconds(), clock.total().Seconds(), 0.01)
}

func TestRealClockPacesAtLeastTheCap(t *testing.T) {
	// A lower bound only: a busy machine can make it slower, never faster.
	const size = 2 << 20
	o, _ := origin(t, make([]byte, size))
	s := startProxy(t, o.URL, Link{PerConn: 8 << 20, RTT: 20 * time.Millisecond}, nil)
	start := time.Now()
	get(t, http.DefaultClient, s.Addr)
	minimum := 20*time.Millisecond + time.Duration(float64(size-chunk)/float64(8<<20)*float64(time.Second))
	assert.GreaterOrEqual(t, time.Since(start), minimum)
}

func TestBusyTimeSumsRequestsInFlight(t *testing.T) {
	const size = 2 << 20
	o, _ := origin(t, make([]byte, size))
	clock := &fakeClock{}
	s := startProxy(t, o.URL, Link{RTT: 30 * time.Millisecond, PerConn: 1 << 20}, clock)
	for range 3 {
		get(t, http.DefaultClient, s.Addr)
	}
	// Each request: one round trip plus its paced transfer, by the clock;
	// one after another, so busy time equals what the clock advanced.
	c := s.Counters()
	assert.Equal(t, clock.total(), c.Busy)
	assert.Zero(t, c.InFlight)
	assert.Zero(t, c.Errors)
}

func TestUnreachableOriginIsCountedNotLogged(t *testing.T) {
	o, _ := origin(t, []byte("x"))
	o.Close() // nothing listens there any more
	s := startProxy(t, o.URL, Link{}, &fakeClock{})
	resp, err := http.Get("http://" + s.Addr + "/obj")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.EqualValues(t, 1, s.Counters().Errors)
}
