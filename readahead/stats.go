package readahead

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats is a snapshot of a Fetcher's counters.
type Stats struct {
	// BytesFetched is what came from the bucket; Requests the ranged reads
	// started (DemandRequests + SpeculativeRequests).
	BytesFetched, Requests, DemandRequests, SpeculativeRequests int64
	// SpeculativeDropped counts readahead not issued because the memory
	// budget was full; SpeculativeFailed readahead that failed or was
	// cancelled (a demand read fetches those bytes itself).
	SpeculativeDropped, SpeculativeFailed int64
	// Evicted counts kept readahead parts dropped unread to make room for
	// a demand read.
	Evicted int64
	// BytesRead is what ReadAt returned; CacheHitBytes of it came from the
	// disk cache, PrefetchHitBytes from readahead (the rest from the
	// read's own fetches).
	BytesRead, CacheHitBytes, PrefetchHitBytes int64
	// AheadBytes: bytes readahead asked the bucket for on handles opened
	// ahead (Fetcher.OpenAhead), before their reader came.
	AheadBytes int64
	// ChecksumMismatches counts whole objects whose bytes did not match
	// the store's CRC32C (checksum.go).
	ChecksumMismatches int64
	// BudgetInUse is the memory accounted now, BudgetPeak its maximum,
	// BudgetLimit the limit.
	BudgetInUse, BudgetPeak, BudgetLimit int64
}

type counters struct {
	bytesFetched, requests, demandRequests, specRequests atomic.Int64
	specDropped, specFailed, evicted                     atomic.Int64
	bytesRead, cacheHitBytes, prefetchHitBytes           atomic.Int64
	aheadBytes                                           atomic.Int64
	checksumMismatches                                   atomic.Int64
}

// Stats returns the current counters.
func (f *Fetcher) Stats() Stats {
	used, peak := f.budget.snapshot()
	return Stats{
		BytesFetched:        f.stats.bytesFetched.Load(),
		Requests:            f.stats.requests.Load(),
		DemandRequests:      f.stats.demandRequests.Load(),
		SpeculativeRequests: f.stats.specRequests.Load(),
		SpeculativeDropped:  f.stats.specDropped.Load(),
		SpeculativeFailed:   f.stats.specFailed.Load(),
		Evicted:             f.stats.evicted.Load(),
		BytesRead:           f.stats.bytesRead.Load(),
		CacheHitBytes:       f.stats.cacheHitBytes.Load(),
		PrefetchHitBytes:    f.stats.prefetchHitBytes.Load(),
		AheadBytes:          f.stats.aheadBytes.Load(),
		ChecksumMismatches:  f.stats.checksumMismatches.Load(),
		BudgetInUse:         used,
		BudgetPeak:          peak,
		BudgetLimit:         f.budget.limit,
	}
}

func (f *Fetcher) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	counter := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	f.windowHist = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ferry_readahead_window_bytes",
		Help:    "Readahead window size of sequential streams, observed each time it grows.",
		Buckets: prometheus.ExponentialBuckets(1<<20, 2, 10),
	})
	f.collectors = []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ferry_readahead_budget_bytes",
			Help: "Memory accounted against the readahead budget.",
		}, func() float64 { used, _ := f.budget.snapshot(); return float64(used) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ferry_readahead_budget_peak_bytes",
			Help: "Most memory ever accounted against the readahead budget at once.",
		}, func() float64 { _, peak := f.budget.snapshot(); return float64(peak) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ferry_readahead_budget_limit_bytes",
			Help: "The readahead memory budget (--memory-limit).",
		}, func() float64 { return float64(f.budget.limit) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ferry_readahead_mapped_bytes",
			Help: "Read buffers mapped outside the Go heap for huge pages, in use or kept for reuse.",
		}, func() float64 { mapped, _ := f.pool.mapped.snapshot(); return float64(mapped) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ferry_readahead_mapped_free_bytes",
			Help: "Of ferry_readahead_mapped_bytes, buffers kept for reuse (within the budget not in use; returned after 10s unused).",
		}, func() float64 { _, free := f.pool.mapped.snapshot(); return float64(free) }),
		counter("ferry_readahead_dropped_total",
			"Readahead parts not issued because the memory budget was full.", &f.stats.specDropped),
		counter("ferry_readahead_fetched_bytes_total",
			"Bytes received from the bucket.", &f.stats.bytesFetched),
		counter("ferry_readahead_requests_total",
			"Ranged reads started.", &f.stats.requests),
		counter("ferry_readahead_speculative_requests_total",
			"Ranged reads started by readahead rather than by a read waiting for them.", &f.stats.specRequests),
		counter("ferry_readahead_ahead_bytes_total",
			"Bytes readahead asked for on handles opened ahead (OpenAhead), before their reader came.", &f.stats.aheadBytes),
		counter("ferry_readahead_read_bytes_total",
			"Bytes returned to readers; fetched bytes over these are the read amplification.", &f.stats.bytesRead),
		counter("ferry_readahead_checksum_mismatches_total",
			"Objects fetched whole whose bytes did not match the CRC32C the store gives for them (fetched again once; a second mismatch fails the read with EIO).", &f.stats.checksumMismatches),
		f.windowHist,
	}
	for i, c := range f.collectors {
		if err := reg.Register(c); err != nil {
			for _, d := range f.collectors[:i] {
				reg.Unregister(d)
			}
			return err
		}
	}
	f.reg = reg
	return nil
}
