// Package netem emulates a remote object store's network link in front of
// a local emulator: an HTTP reverse proxy that adds a round-trip delay to
// every request, caps each client connection's bandwidth and the whole
// link's, and counts requests and bytes so a benchmark can report read
// amplification.
//
// It must never change a byte of what it forwards, nor the Host header
// (S3 signatures and fake-gcs-server's public host depend on it).
package netem

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Link describes the emulated network. Zero values mean "no limit".
type Link struct {
	// RTT is added once per request before it is forwarded: the time to
	// the first byte of a response on a far-away store.
	RTT time.Duration
	// PerConn caps each client connection, in bytes per second (one TCP
	// flow to a far store rarely exceeds a few hundred Mbit/s).
	PerConn float64
	// Total caps the whole link, in bytes per second.
	Total float64
}

// Default is the link the benchmark emulates unless told otherwise:
// 30 ms round trip, 50 MB/s per connection, 500 MB/s in all.
var Default = Link{RTT: 30 * time.Millisecond, PerConn: 50e6, Total: 500e6}

// Clock lets tests run the proxy without real waiting.
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx is done.
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Counters are what the proxy has forwarded so far.
type Counters struct {
	Requests    int64 // requests received
	BytesServed int64 // response body bytes sent to clients
	Connections int64 // client connections accepted
	// InFlight is the requests being served now.
	InFlight int64
	// Busy sums every request's time in the proxy, from arrival to the
	// last byte (by the proxy's clock). Busy over an interval's wall time
	// is the mean number of requests in flight: how much parallelism the
	// client used, which bounds what a per-connection cap lets it reach.
	Busy time.Duration
	// Errors counts requests the proxy could not complete (the emulator
	// failed, or the client went away mid-response, as cancelled
	// readahead does). They are counted, not logged.
	Errors int64
}

// chunk is the unit in which response bodies are paced; small enough that
// pacing is smooth, large enough that a 500 MB/s link is ~8k waits/s.
const chunk = 64 << 10

// Proxy is an http.Handler that forwards to Target through the emulated
// link. Build it with New.
type Proxy struct {
	// Constant data
	target *url.URL
	link   Link
	clock  Clock
	rp     *httputil.ReverseProxy

	// Mutable state
	total       *rate.Limiter // nil: unlimited; safe for concurrent use
	requests    atomic.Int64
	bytesServed atomic.Int64
	conns       atomic.Int64
	inFlight    atomic.Int64
	busy        atomic.Int64 // nanoseconds
	errors      atomic.Int64
}

// New returns a proxy forwarding to target (e.g. "http://127.0.0.1:4443").
// A nil clock means the real one.
func New(target string, link Link, clock Clock) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	if clock == nil {
		clock = realClock{}
	}
	p := &Proxy{target: u, link: link, clock: clock}
	if link.Total > 0 {
		p.total = rate.NewLimiter(rate.Limit(link.Total), chunk)
	}
	p.rp = &httputil.ReverseProxy{
		Director: func(r *http.Request) {
			// Keep r.Host: signatures and public-host checks use it.
			r.URL.Scheme = u.Scheme
			r.URL.Host = u.Host
		},
		Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: 256,
			DisableCompression:  true,
			IdleConnTimeout:     90 * time.Second,
		},
		BufferPool:    bufferPool{},
		FlushInterval: -1,
		// The default handler logs every cancelled response (readahead
		// that was dropped); a count says the same without the noise.
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.errors.Add(1)
			if r.Context().Err() == nil {
				w.WriteHeader(http.StatusBadGateway)
			}
		},
	}
	return p, nil
}

type bufferPool struct{}

var bufs = sync.Pool{New: func() any { b := make([]byte, chunk); return &b }}

func (bufferPool) Get() []byte  { return *(bufs.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { bufs.Put(&b) }

type connKey struct{}

// ConnContext gives each client connection its own bandwidth limiter; set
// it as http.Server.ConnContext (Serve does).
func (p *Proxy) ConnContext(ctx context.Context, _ net.Conn) context.Context {
	p.conns.Add(1)
	var lim *rate.Limiter
	if p.link.PerConn > 0 {
		lim = rate.NewLimiter(rate.Limit(p.link.PerConn), chunk)
	}
	return context.WithValue(ctx, connKey{}, lim)
}

// ServeHTTP delays, forwards, and paces the response body.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	p.inFlight.Add(1)
	start := p.clock.Now()
	defer func() {
		p.busy.Add(int64(p.clock.Now().Sub(start)))
		p.inFlight.Add(-1)
	}()
	if err := p.clock.Sleep(r.Context(), p.link.RTT); err != nil {
		return
	}
	conn, _ := r.Context().Value(connKey{}).(*rate.Limiter)
	p.rp.ServeHTTP(&pacedWriter{ResponseWriter: w, p: p, conn: conn, ctx: r.Context()}, r)
}

// Counters returns a snapshot of the counters.
func (p *Proxy) Counters() Counters {
	return Counters{
		Requests:    p.requests.Load(),
		BytesServed: p.bytesServed.Load(),
		Connections: p.conns.Load(),
		InFlight:    p.inFlight.Load(),
		Busy:        time.Duration(p.busy.Load()),
		Errors:      p.errors.Load(),
	}
}

// wait paces n bytes through both limiters.
func (p *Proxy) wait(ctx context.Context, conn *rate.Limiter, n int) error {
	now := p.clock.Now()
	var d time.Duration
	for _, lim := range []*rate.Limiter{conn, p.total} {
		if lim == nil {
			continue
		}
		if r := lim.ReserveN(now, n); r.OK() {
			if rd := r.DelayFrom(now); rd > d {
				d = rd
			}
		}
	}
	return p.clock.Sleep(ctx, d)
}

type pacedWriter struct {
	http.ResponseWriter
	p    *Proxy
	conn *rate.Limiter
	ctx  context.Context
}

func (w *pacedWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		n := min(len(b), chunk)
		if err := w.p.wait(w.ctx, w.conn, n); err != nil {
			return written, err
		}
		m, err := w.ResponseWriter.Write(b[:n])
		written += m
		w.p.bytesServed.Add(int64(m))
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

func (w *pacedWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Server is a running proxy listening on loopback.
type Server struct {
	*Proxy
	// Addr is host:port clients connect to.
	Addr string
	srv  *http.Server
	done chan struct{}
}

// Serve starts p on addr ("127.0.0.1:0" picks a free port).
func Serve(p *Proxy, addr string) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{Proxy: p, Addr: l.Addr().String(), done: make(chan struct{})}
	s.srv = &http.Server{Handler: p, ConnContext: p.ConnContext, ReadHeaderTimeout: 30 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(l)
	}()
	return s, nil
}

// Close stops listening and closes every connection.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	return err
}
