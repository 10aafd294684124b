package readahead

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"ferry/bucket"
)

// BenchmarkSequentialEmulatedLink reads one object sequentially (1 MiB
// reads, as FUSE with max_read=1MiB) over an emulated link: 30 ms to the
// first byte of every request, 50 MB/s per connection, 500 MB/s in total,
// with the default tuning. It reports MB/s and the fraction of the link
// cap, overall and after the first quarter (ramp-up). The cache variant
// uses the in-memory fake cache, which costs CPU of its own.
//
//	go test -run '^$' -bench EmulatedLink -benchtime 1x ./readahead/
//
// Knobs (environment): NOPACE=1 (no latency or bandwidth limit: the CPU
// ceiling), READ_KIB, MAXWIN_MIB, PART_MIB, CONNS, TRACE=1 (progress).
func BenchmarkSequentialEmulatedLink(b *testing.B) {
	for _, withCache := range []bool{false, true} {
		name := "nocache"
		if withCache {
			name = "cache"
		}
		b.Run(name, func(b *testing.B) {
			const (
				rtt     = 30 * time.Millisecond
				perConn = 50e6
				linkCap = 500e6
				chunk   = 256 << 10
				objSize = 1 << 30
			)
			readBytes := int64(1 << 20)
			if v, err := strconv.ParseInt(os.Getenv("READ_KIB"), 10, 64); err == nil {
				readBytes = v << 10
			}
			fb := newFakeBucket()
			link := rate.NewLimiter(linkCap, chunk)
			var mu sync.Mutex
			conns := map[context.Context]*rate.Limiter{}
			fb.hook = func(ctx context.Context, req *bucket.ReadRequest) error {
				mu.Lock()
				conns[ctx] = rate.NewLimiter(perConn, chunk)
				mu.Unlock()
				if os.Getenv("NOPACE") != "" {
					return nil
				}
				return sleepCtx(ctx, rtt)
			}
			if os.Getenv("NOPACE") == "" {
				fb.pace = func(ctx context.Context, n int) error {
					mu.Lock()
					c := conns[ctx]
					mu.Unlock()
					if err := c.WaitN(ctx, n); err != nil {
						return err
					}
					return link.WaitN(ctx, n)
				}
			}
			cfg := Config{Bucket: fb, MemoryLimit: DefaultMemoryLimit}
			if v, err := strconv.ParseInt(os.Getenv("MAXWIN_MIB"), 10, 64); err == nil {
				cfg.MaxWindow = v << 20
			}
			if v, err := strconv.ParseInt(os.Getenv("PART_MIB"), 10, 64); err == nil {
				cfg.PartSize = v << 20
			}
			if v, err := strconv.Atoi(os.Getenv("CONNS")); err == nil {
				cfg.MaxConnections = v
			}
			if withCache {
				cfg.Cache = newMemCache(1 << 20)
			}
			f, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			obj := fb.put("big", objSize)
			p := make([]byte, readBytes)
			b.SetBytes(objSize)
			b.ResetTimer()
			start := time.Now()
			var steadyStart time.Time
			var steady time.Duration // the last 3/4 of each pass, after ramp-up
			for range b.N {
				h := f.open(obj)
				for off := int64(0); off < objSize; off += readBytes {
					if off == objSize/4 {
						steadyStart = time.Now()
					}
					if os.Getenv("TRACE") != "" && off%(32<<20) == 0 {
						h.mu.Lock()
						w := int64(0)
						if len(h.det.streams) > 0 {
							w = h.det.streams[0].window
						}
						h.mu.Unlock()
						fmt.Fprintf(os.Stderr, "%4d MiB at %v window %d MiB inflight %d\n", off>>20, time.Since(start).Round(time.Millisecond), w>>20, fb.inflight.Load())
					}
					if _, err := h.ReadAt(context.Background(), p, off); err != nil {
						b.Fatal(err)
					}
				}
				steady += time.Since(steadyStart)
				h.Close()
				obj = fb.put("big", objSize) // a new version: no cache hits next round
			}
			elapsed := time.Since(start)
			mbps := float64(b.N) * objSize / elapsed.Seconds()
			b.ReportMetric(mbps/1e6, "MB/s")
			b.ReportMetric(mbps/linkCap, "of-link")
			b.ReportMetric(float64(b.N)*objSize*3/4/steady.Seconds()/linkCap, "steady-of-link")
			st := f.Stats()
			b.ReportMetric(float64(st.BudgetPeak)/(1<<20), "peak-MiB")
		})
	}
}
