package filecache

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// registerMetrics exposes the store's counters; they read the same
// atomics Stats does, so the two never disagree.
func (s *Store) registerMetrics() error {
	if s.reg == nil {
		return nil
	}
	counter := func(name, help string, f func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	gauge := func(name, help string, f func() int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	shadowRatio := func(policy string, i int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "ferry_cache_shadow_hit_ratio",
			Help:        "Hit ratio of late (bytes, decayed) each insertion mode would have had, simulated on a sample of the objects: what ferry_cache_insertion_mode follows.",
			ConstLabels: prometheus.Labels{"policy": policy},
		}, func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.ins.shadow.hitRatio(i)
		})
	}
	cs := []prometheus.Collector{
		counter("ferry_cache_hits_bytes_total", "Bytes served from the local cache.", s.hitBytes.Load),
		counter("ferry_cache_misses_bytes_total", "Bytes asked of the local cache and not found there.", s.missBytes.Load),
		counter("ferry_cache_hits_total", "Blocks served from the local cache.", s.hitBlocks.Load),
		counter("ferry_cache_misses_total", "Blocks asked of the local cache and not found there (absent, evicted or corrupt).", s.missBlocks.Load),
		counter("ferry_cache_written_bytes_total", "Bytes stored in the local cache.", s.writeBytes.Load),
		counter("ferry_cache_evictions_total", "Cache entries (object versions) evicted: LRU under the size limit or the free-space floor, or dropped by ferry invalidate --data.", s.evictions.Load),
		counter("ferry_cache_evicted_unread_bytes_total", "Bytes of cache entries evicted before anything read them since they were written (from the cache, or from readahead's memory): data fetched ahead that the cache could not keep until its reader came, or never wanted.", s.evictedUnreadBytes.Load),
		counter("ferry_cache_corrupt_blocks_total", "Cached blocks dropped because they failed their CRC32C.", s.corrupt.Load),
		counter("ferry_cache_whole_checks_total", "Cached files read whole and checked against their CRC32Cs before the kernel reads them directly (passthrough): once per file per mount, and again after the file changed; with passthrough, files a fetch wrote whole through the page cache (under 4 KiB, or up to 1 MiB on a volume without O_DIRECT) as soon as it has.", s.wholeChecks.Load),
		counter("ferry_cache_whole_checked_bytes_total", "Bytes of those checks.", s.wholeCheckedBytes.Load),
		counter("ferry_cache_read_checks_total", "Cached files too large to check at an open, found whole and good by reads through ferry that covered every block, so that later opens may be passthrough.", s.readChecks.Load),
		counter("ferry_cache_spliced_bytes_total", "Of the bytes served from the local cache, those handed out to be sent from the cache file without ferry checking them again (spliced to the kernel, or copied where no pipe fits): blocks read and checked against their CRC32Cs earlier in the mount, in a file unchanged since.", s.splicedBytes.Load),
		counter("ferry_cache_write_errors_total", "Failed writes to the cache directory.", s.writeErrors.Load),
		gauge("ferry_cache_entries", "Object versions in the local cache.", func() int64 { return s.Stats().Entries }),
		gauge("ferry_cache_cold_entries", "Of ferry_cache_entries, those held in memory as key and size only (not used since the mount, or idle beyond the most recent 16,384): read from the index when next used.", func() int64 { return s.Stats().ColdEntries }),
		counter("ferry_cache_warmed_total", "Cold cache entries read from the index as they were first used.", s.warmed.Load),
		gauge("ferry_cache_insertion_mode", "Where new cache entries enter once the cache is full: 1 scan-resistant (at the least recent end, one in 32 at the most recent: a dataset larger than the cache keeps a stable part), 0 LRU (at the most recent end). Chosen by which of the two would have hit more of late, simulated on a sample of the objects.", s.insertionMode),
		counter("ferry_cache_insertion_switches_total", "Changes of ferry_cache_insertion_mode.", s.insertionStat(func(in *inserter) int64 { return in.switches })),
		counter("ferry_cache_bip_inserts_total", "New cache entries placed at the least recent end (scan-resistant mode, cache full): the next to be evicted unless read again.", s.insertionStat(func(in *inserter) int64 { return in.bipInserts })),
		shadowRatio("lru", 0),
		shadowRatio("scan_resistant", 1),
		gauge("ferry_cache_used_bytes", "Disk space used by cached data.", func() int64 { return s.Stats().UsedBytes }),
		gauge("ferry_cache_limit_bytes", "Cache size limit.", func() int64 { return s.limit }),
		gauge("ferry_cache_min_free_bytes", "Free space the cache leaves on its volume (--cache-min-free): it evicts to keep it.", func() int64 { return s.minFree }),
		gauge("ferry_cache_fs_free_bytes", "Free space on the cache's volume now; at ferry_cache_min_free_bytes the cache stops growing and evicts.", func() int64 {
			avail, _, err := s.hooks.statfs(s.dir)
			if err != nil {
				return 0
			}
			return avail
		}),
	}
	for i, c := range cs {
		if err := s.reg.Register(c); err != nil {
			for _, r := range cs[:i] {
				s.reg.Unregister(r)
			}
			return fmt.Errorf("register cache metrics: %w", err)
		}
	}
	s.metrics = cs
	return nil
}

// insertionMode is 1 in scan-resistant mode, 0 in LRU mode (insert.go).
func (s *Store) insertionMode() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ins.lru {
		return 0
	}
	return 1
}

// insertionStat reads a counter of the insertion policy.
func (s *Store) insertionStat(f func(*inserter) int64) func() int64 {
	return func() int64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return f(&s.ins)
	}
}
