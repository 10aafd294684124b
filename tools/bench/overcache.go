package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"ferry/tools/bench/dataset"
	"ferry/tools/bench/workload"
)

// The over-cache workload: a dataset larger than ferry's disk cache, read
// whole, file after file, epoch after epoch on one mount, once with the
// cache at dataset/1.5 and once at dataset/3, in the same order every
// epoch and then in a new order each epoch (shuffled, as training reads). Its figure is the hit ratio
// of each epoch, from the store's own byte count (the proxy's): 1 -
// bytes fetched / bytes read. What a cache that keeps a stable subset
// reaches from epoch 2 on is cache/dataset; LRU churns below it.
const overCacheName = "over-cache"

// overCacheRatios are the dataset/cache ratios it runs.
var overCacheRatios = []float64{1.5, 3}

// overCacheShuffles: in order, then shuffled.
var overCacheShuffles = []bool{false, true}

// overCacheGroup is the dataset group of the over-cache workload.
func overCacheGroup(o Options) dataset.Group {
	return dataset.Group{Dir: "epochs", Count: o.OverCacheFiles, Size: o.OverCacheSize}
}

// runOverCache runs the over-cache workload for every ratio, each on a
// fresh cache and mount, and notes the hit ratios per epoch.
func (b *bench) runOverCache(ctx context.Context) error {
	var files []string
	var total int64
	for _, f := range b.spec.Group(overCacheGroup(b.opts).Dir) {
		files = append(files, f.Name)
		total += f.Size
	}
	for _, shuffle := range overCacheShuffles {
		for _, ratio := range overCacheRatios {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			size := int64(float64(total) / ratio)
			hits, err := b.overCacheEpochs(ctx, ratio, shuffle, size, files, total)
			if err != nil {
				return err
			}
			var pct []string
			for _, h := range hits {
				pct = append(pct, fmt.Sprintf("%.0f%%", 100*h))
			}
			order := "in order"
			if shuffle {
				order = "shuffled each epoch"
			}
			note := fmt.Sprintf("%s %gx: %d MiB read whole %s over a %d MiB cache; hit ratio per epoch %s (cache/dataset %.0f%%)",
				overCacheName, ratio, total>>20, order, size>>20, strings.Join(pct, ", "), 100/ratio)
			b.logf("%s", note)
			b.report.Notes = append(b.report.Notes, note)
		}
	}
	return nil
}

// overCacheEpochs mounts ferry with a cache of size bytes and reads files
// (total bytes) once per epoch, in a new order each epoch if shuffle,
// returning each epoch's hit ratio.
func (b *bench) overCacheEpochs(ctx context.Context, ratio float64, shuffle bool, size int64, files []string, total int64) ([]float64, error) {
	cacheDir := filepath.Join(b.opts.WorkDir, fmt.Sprintf("cache-over-%g-%v", ratio, shuffle))
	if err := os.RemoveAll(cacheDir); err != nil {
		return nil, err
	}
	defer os.RemoveAll(cacheDir)
	f := *b.ferry
	f.Args = append(slices.Clone(f.Args), "--cache-size", fmt.Sprint(size))
	b.mounts++
	dir := filepath.Join(b.opts.WorkDir, "mnt")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	m, err := f.Mount(ctx, dir, cacheDir, b.mounts)
	if err != nil {
		return nil, err
	}
	defer b.unmount(m)
	name := fmt.Sprintf("%s-%gx", overCacheName, ratio)
	if shuffle {
		name += "-shuffled"
	}
	rng := rand.New(rand.NewPCG(1, 2)) // the same orders every run
	order := files
	w := Workload{
		Name: name, Expect: total,
		Run: func(ctx context.Context, root string, p workload.Progress) (Row, error) {
			// One stream, file after file.
			r, err := workload.Sequential(ctx, root, order, 1, seqBuf, p)
			return fromResult(r), err
		},
	}
	var hits []float64
	for epoch := 1; epoch <= b.opts.OverCacheEpochs; epoch++ {
		if shuffle {
			order = slices.Clone(files)
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		if ctx.Err() != nil {
			return hits, ctx.Err()
		}
		row := b.measure(ctx, w, fmt.Sprintf("epoch %d", epoch), "ferry", m.Dir, m)
		if row.Error != "" {
			return hits, fmt.Errorf("%s epoch %d: %s", w.Name, epoch, row.Error)
		}
		hits = append(hits, hitRatio(row.StoreBytes, total))
	}
	return hits, nil
}

// hitRatio is the share of read bytes not fetched from the store.
func hitRatio(fetched, read int64) float64 {
	if read <= 0 {
		return 0
	}
	return max(0, 1-float64(fetched)/float64(read))
}
