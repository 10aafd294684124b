package control

// ferry stats: the daemon answers a snapshot of its counters (op
// "stats"); the client turns two snapshots into rates.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"
)

// series is one counter or gauge of the daemon's metrics, without the
// labels every series of the mount carries.
type series struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	Value  float64           `json:"value"`
}

// snapshot answers the stats op: the mount's ferry_* counters and gauges
// (histograms are left out), and when they were read.
func snapshot(g prometheus.Gatherer, constant map[string]bool) ([]series, error) {
	fams, err := g.Gather()
	if err != nil {
		return nil, err
	}
	var out []series
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "ferry_") {
			continue
		}
		for _, m := range f.GetMetric() {
			s := series{Name: f.GetName()}
			switch {
			case m.Counter != nil:
				s.Value = m.GetCounter().GetValue()
			case m.Gauge != nil:
				s.Value = m.GetGauge().GetValue()
			default:
				continue
			}
			for _, l := range m.GetLabel() {
				if !constant[l.GetName()] {
					if s.Labels == nil {
						s.Labels = map[string]string{}
					}
					s.Labels[l.GetName()] = l.GetValue()
				}
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// counters is a snapshot by name, for sums.
type counters struct {
	at     time.Time
	series []series
}

// sum adds the series of name whose labels match every key of want; a
// value that starts with "!" must not match.
func (c counters) sum(name string, want map[string]string) float64 {
	var total float64
next:
	for _, s := range c.series {
		if s.Name != name {
			continue
		}
		for k, v := range want {
			if neg, ok := strings.CutPrefix(v, "!"); ok {
				if s.Labels[k] == neg {
					continue next
				}
			} else if s.Labels[k] != v {
				continue next
			}
		}
		total += s.Value
	}
	return total
}

// StatsSample is one line of `ferry stats`: rates over Interval, and the
// gauges at its end.
type StatsSample struct {
	MountPoint string  `json:"mountpoint"`
	Interval   float64 `json:"interval_seconds"`
	// Bytes returned to readers through ferry per second (cache, store,
	// spliced); passthrough reads do not reach ferry.
	ReadBytesPerSec     float64 `json:"read_bytes_per_second"`
	StoreRequestsPerSec float64 `json:"store_requests_per_second"`
	StoreBytesPerSec    float64 `json:"store_bytes_per_second"`
	// CacheHitRatio is the share of the bytes served that the store did
	// not send: 1 - store bytes / bytes served, where bytes served
	// include spliced reads and, by their size, the files opened for
	// passthrough. nil when nothing was read.
	CacheHitRatio          *float64 `json:"cache_hit_ratio"`
	SplicedBytesPerSec     float64  `json:"spliced_bytes_per_second"`
	PassthroughOpensPerSec float64  `json:"passthrough_opens_per_second"`
	BudgetBytes            float64  `json:"budget_bytes"`
	BudgetLimitBytes       float64  `json:"budget_limit_bytes"`
	ReadaheadDroppedPerSec float64  `json:"readahead_dropped_per_second"`
	CacheUsedBytes         float64  `json:"cache_used_bytes"`
	CacheLimitBytes        float64  `json:"cache_limit_bytes"`
	OpenFiles              float64  `json:"open_files"`
	// Reads and lookups that failed for applications (EIO: the store
	// failed past its retries; ESTALE: the object changed under an open
	// file), and store errors after retries (not found and cancelled are
	// not counted), per second.
	ErrorsPerSec      float64 `json:"errors_per_second"`
	StoreErrorsPerSec float64 `json:"store_errors_per_second"`
}

// sample computes the rates between two snapshots.
func sample(mountPoint string, a, b counters) StatsSample {
	dt := b.at.Sub(a.at).Seconds()
	if dt <= 0 {
		dt = math.SmallestNonzeroFloat64
	}
	rate := func(name string, want map[string]string) float64 {
		return max(b.sum(name, want)-a.sum(name, want), 0) / dt
	}
	s := StatsSample{
		MountPoint:             mountPoint,
		Interval:               dt,
		ReadBytesPerSec:        rate("ferry_readahead_read_bytes_total", nil),
		StoreRequestsPerSec:    rate("ferry_store_requests_total", nil),
		StoreBytesPerSec:       rate("ferry_store_read_bytes_total", nil),
		SplicedBytesPerSec:     rate("ferry_cache_spliced_bytes_total", nil),
		PassthroughOpensPerSec: rate("ferry_fs_passthrough_opens_total", nil),
		BudgetBytes:            b.sum("ferry_readahead_budget_bytes", nil),
		BudgetLimitBytes:       b.sum("ferry_readahead_budget_limit_bytes", nil),
		ReadaheadDroppedPerSec: rate("ferry_readahead_dropped_total", nil),
		CacheUsedBytes:         b.sum("ferry_cache_used_bytes", nil),
		CacheLimitBytes:        b.sum("ferry_cache_limit_bytes", nil),
		OpenFiles: b.sum("ferry_fuse_ops_total", map[string]string{"op": "open"}) -
			b.sum("ferry_fuse_errors_total", map[string]string{"op": "open"}) -
			b.sum("ferry_fuse_ops_total", map[string]string{"op": "release"}),
		ErrorsPerSec: rate("ferry_fuse_errors_total", map[string]string{"errno": "EIO"}) +
			rate("ferry_fuse_errors_total", map[string]string{"errno": "ESTALE"}),
		StoreErrorsPerSec: rate("ferry_store_errors_total", map[string]string{"kind": "!not_found"}) - rate("ferry_store_errors_total", map[string]string{"kind": "canceled"}),
	}
	// Bytes served that the store did not send: from the disk cache,
	// spliced from it, or read by the kernel from it (passthrough, by
	// file size). Readahead the readers never used counts against it.
	if served := s.ReadBytesPerSec + rate("ferry_fs_passthrough_opened_bytes_total", nil); served > 0 {
		r := min(max(1-s.StoreBytesPerSec/served, 0), 1)
		s.CacheHitRatio = &r
	}
	return s
}

// StatsRequest is one run of `ferry stats`.
type StatsRequest struct {
	// Path is the mount point, or any path in the mount.
	Path string
	// Interval between samples (one second).
	Interval time.Duration
	// JSON prints one sample as JSON and returns.
	JSON bool
	// Count stops after this many samples; 0 runs until ctx ends.
	Count int
	// Clear redraws the screen for each sample (a terminal); otherwise a
	// line is printed per sample, under one header.
	Clear  bool
	Stdout io.Writer
}

// Stats shows the live counters of the mount holding req.Path.
func Stats(ctx context.Context, req StatsRequest) error {
	socket, _, dev, err := locate(req.Path)
	if err != nil {
		return fmt.Errorf("%s: %w", req.Path, err)
	}
	mp, _, _ := ferryMount(req.Path)
	ask := func() (counters, error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := call(cctx, socket, &request{Op: "stats", Dev: dev})
		if err != nil {
			return counters{}, err
		}
		return counters{at: time.Unix(0, resp.At), series: resp.Series}, nil
	}
	prev, err := ask()
	if err != nil {
		return err
	}
	for n := 0; req.Count == 0 || n < req.Count || req.JSON; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(req.Interval):
		}
		cur, err := ask()
		if err != nil {
			return fmt.Errorf("%s: the mount stopped answering (unmounted?): %w", mp, err)
		}
		s := sample(mp, prev, cur)
		prev = cur
		if req.JSON {
			enc := json.NewEncoder(req.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(s)
		}
		if req.Clear {
			fmt.Fprint(req.Stdout, "\x1b[H\x1b[2J")
			fmt.Fprintf(req.Stdout, "ferry stats %s (every %v; Ctrl-C ends)\n\n", mp, req.Interval)
		}
		if req.Clear || n%20 == 0 {
			fmt.Fprintln(req.Stdout, statsHeader)
		}
		fmt.Fprintln(req.Stdout, s.line())
	}
	return nil
}

const statsHeader = "    read/s   store req/s    store/s   hit%  spliced/s  pt opens/s   budget        cache used  open  err/s  store err/s"

// line is the sample as a row under statsHeader.
func (s StatsSample) line() string {
	hit := "    -"
	if s.CacheHitRatio != nil {
		hit = fmt.Sprintf("%5.1f", 100**s.CacheHitRatio)
	}
	budget := "-"
	if s.BudgetLimitBytes > 0 {
		budget = fmt.Sprintf("%3.0f%% of %s", 100*s.BudgetBytes/s.BudgetLimitBytes, iec(s.BudgetLimitBytes))
	}
	cache := "-"
	if s.CacheLimitBytes > 0 {
		cache = iec(s.CacheUsedBytes) + "/" + iec(s.CacheLimitBytes)
	}
	return fmt.Sprintf("%10s %13.0f %10s  %5s %10s %11.1f   %-13s %-11s %5.0f %6.1f %12.1f",
		iec(s.ReadBytesPerSec), s.StoreRequestsPerSec, iec(s.StoreBytesPerSec), hit, iec(s.SplicedBytesPerSec),
		s.PassthroughOpensPerSec, budget, cache, s.OpenFiles, s.ErrorsPerSec, s.StoreErrorsPerSec)
}

// iec prints bytes as 12MiB.
func iec(b float64) string {
	return strings.ReplaceAll(humanize.IBytes(uint64(max(b, 0))), " ", "")
}
