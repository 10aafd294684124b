package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// faultKind is what the fault proxy does to the requests it hits.
type faultKind int

const (
	faultNone faultKind = iota
	// faultReset forwards the headers and half the body, then resets
	// the connection (TCP RST).
	faultReset
	// faultStatus answers status (500, 503, 429) with Retry-After.
	faultStatus
	// faultStall forwards the headers and half the body, then sends
	// nothing until the client gives up (or the proxy is closed).
	faultStall
	// faultDown: the store is down; connections are refused. Set with
	// setDown, not setFault.
	faultDown
	// faultFlip forwards the whole body with one bit of its first byte
	// flipped: a body corrupted on the way, its status and length right.
	faultFlip
)

// fault says which requests to hit and how.
type fault struct {
	kind       faultKind
	status     int    // faultStatus
	retryAfter string // faultStatus: the Retry-After header, "" for none
	// times is how many matching requests to hit; 0 is all of them.
	times int
	// all hits every request; otherwise only ranged GETs (object data).
	all bool
}

// faultProxy sits between ferry and a store (the counting netem proxy in
// front of an emulator) and injects faults, switchable at runtime.
type faultProxy struct {
	addr   string
	target *url.URL
	// host, if set, replaces the Host header (fake-gcs-server answers
	// XML reads only for its public host); S3 keeps the signed Host.
	host string
	rt   *http.Transport
	srv  *http.Server

	mu    sync.Mutex
	f     fault                 // GUARDED_BY(mu)
	hits  int                   // GUARDED_BY(mu): requests hit by f so far
	ln    net.Listener          // GUARDED_BY(mu): nil while down
	conns map[net.Conn]struct{} // GUARDED_BY(mu)
	stop  chan struct{}         // closed by close: releases stalls

	injected atomic.Int64 // faults injected so far
	served   atomic.Int64 // requests forwarded untouched
}

// newFaultProxy starts a proxy to the store s is reached through and
// returns a copy of s that goes through it.
func newFaultProxy(t *testing.T, s *store) (*faultProxy, *store) {
	t.Helper()
	require.NotNil(t, s.proxy, "fault proxy needs a networked store")
	target, err := url.Parse("http://" + s.proxy.Addr)
	require.NoError(t, err)
	p := &faultProxy{
		target: target,
		rt:     &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
		conns:  map[net.Conn]struct{}{},
		stop:   make(chan struct{}),
	}
	if s.kind == "gcs" {
		p.host = s.proxy.Addr
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.ln, p.addr = ln, ln.Addr().String()
	p.srv = &http.Server{
		Handler: p,
		ConnState: func(c net.Conn, st http.ConnState) {
			p.mu.Lock()
			defer p.mu.Unlock()
			switch st {
			case http.StateNew:
				p.conns[c] = struct{}{}
			case http.StateClosed, http.StateHijacked:
				delete(p.conns, c)
			}
		},
	}
	go p.srv.Serve(ln)
	t.Cleanup(p.close)

	via := *s
	via.args = append([]string{}, s.args...)
	for i, a := range via.args {
		if a == "--endpoint" {
			via.args[i+1] = "http://" + p.addr
		}
	}
	return p, &via
}

// setFault switches the fault; fault{} passes everything through.
func (p *faultProxy) setFault(f fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.f, p.hits = f, 0
}

// setDown takes the store down (connections refused, open ones cut) or
// brings it back on the same address.
func (p *faultProxy) setDown(t *testing.T, down bool) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if down {
		if p.ln != nil {
			p.ln.Close()
			p.ln = nil
		}
		for c := range p.conns {
			c.Close()
		}
		return
	}
	if p.ln != nil {
		return
	}
	var err error
	for range 50 { // the port may linger briefly
		if p.ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err, "re-listening on %s", p.addr)
	go p.srv.Serve(p.ln)
}

func (p *faultProxy) close() {
	p.mu.Lock()
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.mu.Unlock()
	_ = p.srv.Close()
	p.rt.CloseIdleConnections()
}

// take reports the fault to apply to r, counting it.
func (p *faultProxy) take(r *http.Request) fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.f
	if f.kind == faultNone || (!f.all && (r.Method != http.MethodGet || r.Header.Get("Range") == "")) {
		return fault{}
	}
	if f.times > 0 && p.hits >= f.times {
		return fault{}
	}
	p.hits++
	p.injected.Add(1)
	return f
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := p.take(r)
	if f.kind == faultStatus {
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(f.status)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>injected</Message></Error>`)
		return
	}
	if f.kind == faultNone {
		p.served.Add(1)
	}

	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = p.target.Scheme, p.target.Host
	if p.host != "" {
		out.Host = p.host
	}
	resp, err := p.rt.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	switch f.kind {
	case faultNone:
		io.Copy(w, resp.Body)
		return
	case faultFlip:
		var first [1]byte
		if n, _ := io.ReadFull(resp.Body, first[:]); n == 1 {
			first[0] ^= 0x01
			w.Write(first[:])
		}
		io.Copy(w, resp.Body)
		return
	}

	// Send half the body (at least a byte), then fail.
	n, _ := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
	io.CopyN(w, resp.Body, max(n/2, 1))
	w.(http.Flusher).Flush()
	switch f.kind {
	case faultReset:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0) // close with RST
		}
		conn.Close()
	case faultStall:
		select {
		case <-r.Context().Done():
		case <-p.stop:
		case <-time.After(2 * time.Minute):
		}
		panic(http.ErrAbortHandler)
	}
}

// errTimeout marks a test-side wait that ran out.
var errTimeout = errors.New("timed out")

// within runs fn and waits at most d for it: a hung FUSE read must fail
// the test, not hang it. The goroutine is left behind if it hangs.
func within(d time.Duration, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return errTimeout
	}
}
