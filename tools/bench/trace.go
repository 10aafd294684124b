package main

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"ferry/tools/bench/netem"
)

// tracedLink serves a netem proxy and keeps a record of every request:
// when it came, how long it took, which object and range it asked for,
// and how many body bytes went back. `bench cluster` puts one in front of
// the origin (what the tier fetches) and one in front of the tier (what
// ferry asks), which is how a read's amplification is taken apart.
type tracedLink struct {
	*netem.Proxy
	// Addr is the host:port clients dial.
	Addr string

	srv  *http.Server
	done chan struct{}
	t0   time.Time

	mu  sync.Mutex
	log []traceEntry // GUARDED_BY(mu)
}

// traceEntry is one request through a tracedLink.
type traceEntry struct {
	Start   time.Duration // since the epoch given to serveTraced
	Elapsed time.Duration // to the last byte
	Method  string
	Object  string // the URL path: /bucket/key
	// Offset is where the asked range starts (0 without a Range header);
	// Asked is its length, -1 for "to the end".
	Offset, Asked int64
	Bytes         int64 // body bytes sent
	Status        int
}

// serveTraced starts p on a free loopback port; the log's times count
// from epoch, so that two links' logs line up.
func serveTraced(p *netem.Proxy, epoch time.Time) (*tracedLink, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &tracedLink{Proxy: p, Addr: l.Addr().String(), done: make(chan struct{}), t0: epoch}
	t.srv = &http.Server{Handler: t, ConnContext: p.ConnContext, ReadHeaderTimeout: 30 * time.Second}
	go func() {
		defer close(t.done)
		_ = t.srv.Serve(l)
	}()
	return t, nil
}

// Close stops listening and closes every connection.
func (t *tracedLink) Close() error {
	err := t.srv.Close()
	<-t.done
	return err
}

// ServeHTTP forwards through the proxy and records the request.
func (t *tracedLink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	cw := &countingWriter{ResponseWriter: w, status: http.StatusOK}
	t.Proxy.ServeHTTP(cw, r)
	off, asked := parseRange(r.Header.Get("Range"))
	e := traceEntry{Start: start.Sub(t.t0), Elapsed: time.Since(start), Method: r.Method, Object: r.URL.Path,
		Offset: off, Asked: asked, Bytes: cw.n, Status: cw.status}
	t.mu.Lock()
	t.log = append(t.log, e)
	t.mu.Unlock()
}

// mark is a point in the log, to take the requests of one phase.
func (t *tracedLink) mark() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.log)
}

// since returns the requests recorded after mark m.
func (t *tracedLink) since(m int) []traceEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.log[m:])
}

// writeCSV writes the whole log, one request a line.
func (t *tracedLink) writeCSV(w io.Writer) error {
	t.mu.Lock()
	log := slices.Clone(t.log)
	t.mu.Unlock()
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"start_s", "elapsed_s", "method", "object", "offset", "asked", "bytes", "status"})
	for _, e := range log {
		_ = cw.Write([]string{
			fmt.Sprintf("%.3f", e.Start.Seconds()), fmt.Sprintf("%.3f", e.Elapsed.Seconds()), e.Method, e.Object,
			strconv.FormatInt(e.Offset, 10), strconv.FormatInt(e.Asked, 10), strconv.FormatInt(e.Bytes, 10), strconv.Itoa(e.Status)})
	}
	cw.Flush()
	return cw.Error()
}

// countingWriter counts the body bytes and keeps the status.
type countingWriter struct {
	http.ResponseWriter
	n      int64
	status int
}

func (w *countingWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// parseRange reads "bytes=A-B" or "bytes=A-" as an offset and a length
// (-1: to the end); anything else, or none, is the whole object.
func parseRange(h string) (off, n int64) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, -1
	}
	a, b, ok := strings.Cut(spec, "-")
	start, err := strconv.ParseInt(a, 10, 64)
	if !ok || err != nil {
		return 0, -1
	}
	if b == "" {
		return start, -1
	}
	end, err := strconv.ParseInt(b, 10, 64)
	if err != nil || end < start {
		return 0, -1
	}
	return start, end - start + 1
}

// TraceSummary is what the requests of one phase add up to.
type TraceSummary struct {
	Requests int64 `json:"requests"`
	Bytes    int64 `json:"bytes"`
	// Distinct is the bytes of the union of the ranges served, per
	// object; Bytes - Distinct were served more than once in the phase.
	Distinct int64 `json:"distinct_bytes"`
	// Sizes counts the requests by the length they asked for ("4MiB",
	// "to end").
	Sizes map[string]int64 `json:"sizes"`
	// P50 and Max are the requests' times to their last byte, seconds.
	P50 float64 `json:"p50_s"`
	Max float64 `json:"max_s"`
	// Slow counts the requests that took a second or more: on the tier,
	// those that waited for a cache fill.
	Slow int64 `json:"slow"`
}

// summarize adds up GET requests.
func summarize(log []traceEntry) TraceSummary {
	s := TraceSummary{Sizes: map[string]int64{}}
	served := map[string][][2]int64{}
	var times []float64
	for _, e := range log {
		if e.Method != http.MethodGet || e.Bytes == 0 {
			continue
		}
		s.Requests++
		s.Bytes += e.Bytes
		served[e.Object] = append(served[e.Object], [2]int64{e.Offset, e.Offset + e.Bytes})
		size := "to end"
		if e.Asked >= 0 {
			size = sizeLabel(e.Asked)
		}
		s.Sizes[size]++
		times = append(times, e.Elapsed.Seconds())
		if e.Elapsed >= time.Second {
			s.Slow++
		}
	}
	for _, rs := range served {
		s.Distinct += unionLen(rs)
	}
	if len(times) > 0 {
		slices.Sort(times)
		s.P50, s.Max = times[len(times)/2], times[len(times)-1]
	}
	return s
}

// unionLen is the length of the union of half-open ranges [a, b).
func unionLen(rs [][2]int64) int64 {
	slices.SortFunc(rs, func(x, y [2]int64) int { return cmp.Compare(x[0], y[0]) })
	var total, end int64 = 0, -1
	for _, r := range rs {
		if r[0] > end {
			total += r[1] - r[0]
			end = r[1]
		} else if r[1] > end {
			total += r[1] - end
			end = r[1]
		}
	}
	return total
}
