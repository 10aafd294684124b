// Command lookups measures how long a Stat waits while the store's
// connections are busy with ranged reads: 4 streams of 4 MiB reads, 32 in
// flight (readahead's default budget), against the GCS emulator behind
// the benchmark's emulated link (30 ms round trip, 50 MB/s per
// connection, 500 MB/s in all), and 60 Stats among them, one every 50 ms.
//
//	go run ./tools/lookups
//
// It needs fake-gcs-server (built once through the module proxy, as the
// benchmark does) and prints the Stats' latency percentiles. It must
// never touch anything but its own temporary directory.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"ferry/bucket"
	"ferry/bucket/connect"
	"ferry/bucket/emulator"
	"ferry/tools/bench/netem"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "lookups:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ferry-lookups-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	port, err := emulator.FreePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	emu, err := emulator.StartGCSWith(ctx, emulator.GCSOptions{Dir: dir, Memory: true, PublicHost: addr})
	if err != nil {
		return err
	}
	defer emu.Stop()
	proxy, err := netem.New(emu.Endpoint, netem.Default, nil)
	if err != nil {
		return err
	}
	srv, err := netem.Serve(proxy, addr)
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := emu.CreateBucket(ctx, "lookups"); err != nil {
		return err
	}
	st, err := connect.Open(ctx, "gs://lookups", connect.Options{Endpoint: "http://" + addr, Anonymous: true, MaxConnections: 32})
	if err != nil {
		return err
	}
	defer st.Close()
	objs, err := stage(ctx, st.Backend.(bucket.Writer))
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, o := range objs {
		wg.Go(func() { stream(ctx, st, o, sem, stop) })
	}
	time.Sleep(2 * time.Second) // the reads fill every connection
	var lat []time.Duration
	for i := range 60 {
		start := time.Now()
		if _, err := st.Stat(ctx, &bucket.StatRequest{Name: fmt.Sprintf("small%d", i)}); err != nil {
			return err
		}
		lat = append(lat, time.Since(start))
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	p := percentiles(lat, 50, 90, 99)
	fmt.Printf("Stat latency among 32 ranged reads in flight (30 ms link): p50 %v, p90 %v, p99 %v\n",
		p[0].Round(100*time.Microsecond), p[1].Round(100*time.Microsecond), p[2].Round(100*time.Microsecond))
	return nil
}

// stage puts the 4 large objects the streams read and the small ones the
// Stats ask about.
func stage(ctx context.Context, w bucket.Writer) ([]*bucket.Object, error) {
	data := make([]byte, 256<<20)
	var objs []*bucket.Object
	for i := range 4 {
		o, err := w.Put(ctx, &bucket.PutRequest{Name: fmt.Sprintf("big%d", i), Data: data})
		if err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
	for i := range 60 {
		if _, err := w.Put(ctx, &bucket.PutRequest{Name: fmt.Sprintf("small%d", i), Data: []byte("x")}); err != nil {
			return nil, err
		}
	}
	return objs, nil
}

// stream reads o in 4 MiB ranges, round and round, each in its own
// goroutine as long as sem has room, until stop.
func stream(ctx context.Context, b bucket.Bucket, o *bucket.Object, sem chan struct{}, stop chan struct{}) {
	var reads sync.WaitGroup
	defer reads.Wait()
	for off := uint64(0); ; off = (off + 4<<20) % o.Size {
		select {
		case <-stop:
			return
		case sem <- struct{}{}:
		}
		reads.Go(func() {
			defer func() { <-sem }()
			rc, err := b.NewRangeReader(ctx, &bucket.ReadRequest{Name: o.Name, Version: o.Version,
				Range: bucket.ByteRange{Start: off, Limit: off + 4<<20}})
			if err == nil {
				_, _ = io.Copy(io.Discard, rc)
				rc.Close()
			}
		})
	}
}

// percentiles returns the given percentiles (0-100) of ds, nearest rank.
func percentiles(ds []time.Duration, ps ...int) []time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	out := make([]time.Duration, len(ps))
	for i, p := range ps {
		k := (p*len(s) + 99) / 100
		out[i] = s[max(k-1, 0)]
	}
	return out
}
