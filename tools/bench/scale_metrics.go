package main

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The ferry metrics `bench scale` follows during a pass.
const (
	metricHeap      = "go_memstats_heap_inuse_bytes"
	metricMetadata  = "ferry_metadata_bytes"
	metricInodes    = "ferry_fs_inodes"
	metricEvictions = "ferry_metadata_evictions_total"
)

// parseMetrics sums, per name, the samples of the named metrics in a
// Prometheus text exposition (every label set of a name added up).
func parseMetrics(r io.Reader, names ...string) (map[string]float64, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 && i < len(name) {
			name = line[:i]
			j := strings.LastIndexByte(line, '}')
			if j < 0 {
				continue
			}
			rest = strings.TrimSpace(line[j+1:])
			ok = true
		}
		if !ok || !want[name] {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			continue
		}
		out[name] += v
	}
	return out, sc.Err()
}

// scrape fetches url's metrics.
func scrape(client *http.Client, url string) (map[string]float64, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseMetrics(resp.Body, metricHeap, metricMetadata, metricInodes, metricEvictions)
}

// metricPeaks follows ferry's metrics during a pass: the highest heap
// and metadata seen, and the inodes and evictions at the end.
type metricPeaks struct {
	url  string
	quit chan struct{}
	done chan struct{}

	mu                     sync.Mutex
	heap, metadata, inodes int64 // GUARDED_BY(mu)
	evictions              int64 // GUARDED_BY(mu)
}

// watchMetrics scrapes url every period until stop.
func watchMetrics(url string, period time.Duration) *metricPeaks {
	p := &metricPeaks{url: url, quit: make(chan struct{}), done: make(chan struct{})}
	client := &http.Client{Timeout: 2 * time.Second}
	go func() {
		defer close(p.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			p.sample(client)
			select {
			case <-p.quit:
				p.sample(client)
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *metricPeaks) sample(client *http.Client) {
	if p.url == "" {
		return
	}
	m, err := scrape(client, p.url)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.heap = max(p.heap, int64(m[metricHeap]))
	p.metadata = max(p.metadata, int64(m[metricMetadata]))
	p.inodes, p.evictions = int64(m[metricInodes]), int64(m[metricEvictions])
}

// stop ends the watch after one last sample and returns what it saw.
func (p *metricPeaks) stop() (out struct{ heap, metadata, inodes, evictions int64 }) {
	close(p.quit)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	out.heap, out.metadata, out.inodes, out.evictions = p.heap, p.metadata, p.inodes, p.evictions
	return out
}
