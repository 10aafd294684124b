package main

// `bench cluster`: N ferry nodes reading one dataset through a shared
// cache tier (a real SeaweedFS whose remote storage is the emulated
// origin), against the same nodes reading the origin directly. See
// docs/scale-out.md for what it shows and how to read it.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"ferry/bucket"
	"ferry/bucket/emulator"
	"ferry/bucket/s3"
	"ferry/tools/bench/dataset"
	"ferry/tools/bench/netem"
	"ferry/tools/bench/workload"
)

// Setups of the cluster rows.
const (
	SetupDirect = "store-direct" // the bench reads the origin, no ferry
	SetupOrigin = "no tier"      // ferry reads the origin
	SetupTier   = "tier"         // ferry reads the tier, the tier the origin
)

// clusterMain runs `bench cluster ARGS` and returns the exit code.
func clusterMain(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	o, err := parseClusterArgs(argv[2:], stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench cluster: %v\n", err)
		return 2
	}
	if err := runCluster(ctx, o, commandLine(argv), stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "bench cluster: %v\n", err)
		return 1
	}
	return 0
}

// cluster is one run of `bench cluster`: what runs, and the report.
type cluster struct {
	opts   ClusterOptions
	start  time.Time // the request traces' epoch
	spec   dataset.Spec
	files  []string
	sizes  []int64
	stderr io.Writer

	origin     *emulator.S3
	originLink *tracedLink
	tier       *emulator.Seaweed // nil until the tier runs
	tierLink   *tracedLink
	mounts     int

	report *ClusterReport
}

func (c *cluster) logf(format string, args ...any) {
	fmt.Fprintf(c.stderr, "bench cluster: "+format+"\n", args...)
}

// runCluster sets up the origin, runs the baseline and the tier, and
// writes the report. Everything it starts is stopped before it returns.
func runCluster(ctx context.Context, o ClusterOptions, argv []string, stdout, stderr io.Writer) (err error) {
	start := time.Now()
	c := &cluster{opts: o, stderr: stderr, start: start,
		spec: dataset.Spec{Seed: o.Seed, Groups: []dataset.Group{{Dir: "large", Count: o.Files, Size: o.FileSize}}}}
	for _, f := range c.spec.Files() {
		c.files, c.sizes = append(c.files, f.Name), append(c.sizes, f.Size)
	}
	link := netem.Link{RTT: o.RTT, PerConn: o.ConnMBs * 1e6, Total: o.LinkMBs * 1e6}
	c.report = &ClusterReport{Command: argv, Started: start.UTC(), Machine: describeMachine(o.WorkDir), FerryTree: ferryTree(ctx),
		Options: o, Link: linkJSON(link), DatasetBytes: c.spec.TotalBytes(), LoadStart: loadAvg()}
	_ = os.RemoveAll(o.WorkDir)
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil {
		return err
	}
	// The logs stay for a look afterwards; the data does not.
	defer func() {
		for _, pattern := range []string{"origin", "tier/data", "*/node-*/cache"} {
			dirs, _ := filepath.Glob(filepath.Join(o.WorkDir, pattern))
			for _, d := range dirs {
				_ = os.RemoveAll(d)
			}
		}
	}()

	weed, err := c.weedBinary(ctx)
	if err != nil {
		return err
	}
	ferry, err := c.ferryBinary(ctx)
	if err != nil {
		return err
	}
	defer c.stopOrigin() // also what a failed start left running
	if err := c.startOrigin(ctx, link); err != nil {
		return err
	}
	direct, err := s3.New(ctx, s3.Config{Bucket: benchBucket, Endpoint: "http://" + c.originLink.Addr, Region: c.origin.Region,
		PathStyle: true, AccessKey: c.origin.AccessKey, SecretKey: c.origin.SecretKey, MaxConnections: 64})
	if err != nil {
		return err
	}
	c.measureDirect(ctx, direct)

	if !o.NoBaseline && ctx.Err() == nil {
		f := &Ferry{Bin: ferry, Source: "s3://" + benchBucket, Env: c.originEnv(), LogDir: o.WorkDir,
			Args: append([]string{"--endpoint", "http://" + c.originLink.Addr, "--s3-path-style", "--region", c.origin.Region}, o.FerryArgs...)}
		err = c.runNodes(ctx, SetupOrigin, f)
	}
	if err == nil && ctx.Err() == nil {
		err = c.runTier(ctx, weed, ferry)
	}
	if err == nil {
		err = ctx.Err()
	}
	c.report.derive()
	c.report.Duration = time.Since(start).Seconds()
	c.report.LoadEnd = loadAvg()
	if werr := c.write(stdout); werr != nil {
		err = errors.Join(err, werr)
	}
	return err
}

// weedBinary builds SeaweedFS on first use (once per machine, cached like
// the emulators).
func (c *cluster) weedBinary(ctx context.Context) (string, error) {
	if bin, err := emulator.Built(emulator.Weed); err == nil {
		return bin, nil
	}
	c.logf("building SeaweedFS %s once (about 8 minutes, 230 MB)", emulator.Weed.Version)
	t := time.Now()
	bin, err := emulator.Binary(ctx, emulator.Weed)
	if err == nil {
		c.logf("built %s in %v", bin, time.Since(t).Round(time.Second))
	}
	return bin, err
}

func (c *cluster) ferryBinary(ctx context.Context) (string, error) {
	if c.opts.FerryBin != "" {
		return c.opts.FerryBin, nil
	}
	return buildFerry(ctx, c.opts.WorkDir)
}

// startOrigin runs versitygw behind the emulated link and uploads the
// dataset to it directly.
func (c *cluster) startOrigin(ctx context.Context, link netem.Link) error {
	var err error
	if c.origin, err = emulator.StartS3(ctx, filepath.Join(c.opts.WorkDir, "origin")); err != nil {
		return err
	}
	p, err := netem.New(c.origin.Endpoint, link, nil)
	if err != nil {
		return err
	}
	if c.originLink, err = serveTraced(p, c.start); err != nil {
		return err
	}
	if err := c.origin.CreateBucket(ctx, benchBucket); err != nil {
		return err
	}
	w, err := s3.New(ctx, s3.Config{Bucket: benchBucket, Endpoint: c.origin.Endpoint, Region: c.origin.Region, PathStyle: true,
		AccessKey: c.origin.AccessKey, SecretKey: c.origin.SecretKey, MaxConnections: 8})
	if err != nil {
		return err
	}
	t := time.Now()
	if err := c.spec.Upload(ctx, retryingWriter{w}, "", 4, nil); err != nil {
		return fmt.Errorf("uploading the dataset: %w", err)
	}
	c.logf("origin: versitygw %s behind %v RTT, %.0f MB/s per connection, %.0f MB/s in all; %d files, %.0f MiB uploaded in %v",
		emulator.VersityGW.Version, link.RTT, link.PerConn/1e6, link.Total/1e6, len(c.files), float64(c.spec.TotalBytes())/mib, time.Since(t).Round(time.Second))
	return nil
}

func (c *cluster) stopOrigin() {
	if c.originLink != nil {
		_ = c.originLink.Close()
		c.writeTrace("trace-origin.csv", c.originLink)
	}
	if c.origin != nil {
		_ = c.origin.Stop()
	}
}

// originEnv is the credentials of a ferry reading the origin directly.
func (c *cluster) originEnv() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + c.origin.AccessKey, "AWS_SECRET_ACCESS_KEY=" + c.origin.SecretKey,
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null"}
}

// runTier starts SeaweedFS with its remote storage on the origin (through
// the emulated link), optionally pre-warms it, and runs the nodes on it.
func (c *cluster) runTier(ctx context.Context, weed, ferry string) error {
	var err error
	if c.tier, err = emulator.StartSeaweed(ctx, weed, filepath.Join(c.opts.WorkDir, "tier")); err != nil {
		return err
	}
	defer func() {
		if c.tierLink != nil {
			_ = c.tierLink.Close()
			c.writeTrace("trace-tier.csv", c.tierLink)
		}
		_ = c.tier.Stop()
	}()
	m := emulator.RemoteMount{Bucket: benchBucket, Endpoint: "http://" + c.originLink.Addr, Region: c.origin.Region,
		AccessKey: c.origin.AccessKey, SecretKey: c.origin.SecretKey}
	if c.opts.CacheWait != "default" {
		d, _ := time.ParseDuration(c.opts.CacheWait) // validated
		m.CacheWait = &d
	}
	if err := c.tier.MountRemote(ctx, m); err != nil {
		return err
	}
	// An unshaped proxy in front of the tier: the tier is on the LAN, and
	// the proxy only counts and traces what ferry asks of it.
	p, err := netem.New(c.tier.Endpoint, netem.Link{}, nil)
	if err != nil {
		return err
	}
	if c.tierLink, err = serveTraced(p, c.start); err != nil {
		return err
	}
	c.logf("tier: SeaweedFS %s, S3 gateway %s, remote storage %s/%s", emulator.Weed.Version, c.tier.Endpoint, m.Endpoint, m.Bucket)
	if c.opts.Prewarm {
		c.measure(ctx, SetupTier, "prewarm", 0, func(ctx context.Context) (Row, error) {
			t := time.Now()
			err := c.tier.CacheRemote(ctx, benchBucket)
			return Row{Seconds: time.Since(t).Seconds()}, err
		}, nil)
	}
	args := append([]string{"--endpoint", "http://" + c.tierLink.Addr, "--s3-path-style", "--anonymous", "--region", c.origin.Region}, c.opts.FerryArgs...)
	f := &Ferry{Bin: ferry, Source: "s3://" + benchBucket, LogDir: c.opts.WorkDir,
		Args: append(args, c.opts.TierArgs...), Env: []string{"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null"}}
	return c.runNodes(ctx, SetupTier, f)
}

// runNodes mounts the N nodes, each on its own cache and mount point, and
// reads the dataset on each in turn, cold then warm. On the tier, one
// more node follows with an empty cache: one node reading the tier once
// it is warm, the reference of nodes 2..N.
func (c *cluster) runNodes(ctx context.Context, setup string, f *Ferry) error {
	nodes := c.opts.Nodes
	if setup == SetupTier {
		nodes++
	}
	var mounts []*Mount
	defer func() {
		for _, m := range mounts {
			if err := m.Unmount(); err != nil {
				c.logf("unmount: %v", err)
				c.report.Notes = append(c.report.Notes, "unmount: "+oneLine(err.Error()))
			}
		}
	}()
	for i := 1; i <= nodes; i++ {
		dir := filepath.Join(c.opts.WorkDir, strings.ReplaceAll(setup, " ", "-"), fmt.Sprintf("node-%d", i))
		if err := os.MkdirAll(filepath.Join(dir, "mnt"), 0o755); err != nil {
			return err
		}
		c.mounts++
		m, err := f.Mount(ctx, filepath.Join(dir, "mnt"), filepath.Join(dir, "cache"), c.mounts)
		if err != nil {
			return err
		}
		mounts = append(mounts, m)
	}
	for i, m := range mounts {
		for _, phase := range []string{PhaseCold, PhaseWarm} {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.measure(ctx, setup, phase, i+1, func(ctx context.Context) (Row, error) {
				r, err := workload.Sequential(ctx, m.Dir, c.files, c.opts.Streams, seqBuf, nil)
				return fromResult(r), err
			}, m)
		}
	}
	return nil
}

// measureDirect reads the dataset from the origin with the S3 client
// library and no file system: what the emulated link delivers here.
func (c *cluster) measureDirect(ctx context.Context, b bucket.Bucket) {
	c.measure(ctx, SetupDirect, PhaseCold, 0, func(ctx context.Context) (Row, error) {
		return readDirect(ctx, b, c.files, c.sizes, directParallel, directPart, nil)
	}, nil)
}

// measure runs read once, the page cache dropped first, and records what
// it cost the origin, the tier and the node's ferry (m; nil for rows
// without one).
func (c *cluster) measure(ctx context.Context, setup, phase string, node int, read func(context.Context) (Row, error), m *Mount) {
	dropPageCache()
	origin0, originMark := c.originLink.Counters(), c.originLink.mark()
	originCPU0, _ := procCPU(c.origin.Pid())
	var tier0 netem.Counters
	var tierMark int
	var tierCPU0, ferryCPU0 time.Duration
	if c.tierLink != nil {
		tier0, tierMark = c.tierLink.Counters(), c.tierLink.mark()
		tierCPU0, _ = procCPU(c.tier.Pid())
	}
	if m != nil {
		ferryCPU0, _ = procCPU(m.Pid)
	}

	began := time.Since(c.start).Seconds()
	r, err := read(ctx)

	row := ClusterRow{Setup: setup, Phase: phase, Node: node, Start: began, Bytes: r.Bytes, Seconds: r.Seconds}
	o1 := c.originLink.Counters()
	row.OriginRequests, row.OriginBytes = o1.Requests-origin0.Requests, o1.BytesServed-origin0.BytesServed
	o := summarize(c.originLink.since(originMark))
	row.Origin = &o
	if t, err := procCPU(c.origin.Pid()); err == nil {
		row.OriginCPU = (t - originCPU0).Seconds()
	}
	if c.tierLink != nil {
		t1 := c.tierLink.Counters()
		row.TierRequests, row.TierBytes = t1.Requests-tier0.Requests, t1.BytesServed-tier0.BytesServed
		s := summarize(c.tierLink.since(tierMark))
		row.Tier = &s
		if t, err := procCPU(c.tier.Pid()); err == nil {
			row.TierCPU = (t - tierCPU0).Seconds()
		}
	}
	if m != nil {
		if t, err := procCPU(m.Pid); err == nil {
			row.FerryCPU = (t - ferryCPU0).Seconds()
		}
		if err == nil {
			if cerr := checkRanges(c.spec, m.Dir, c.files, c.sizes, 4, 1<<20, c.opts.Seed+uint64(node)); cerr != nil {
				row.Verified = "WRONG: " + cerr.Error()
			} else {
				row.Verified = "ok"
			}
		}
	}
	if err != nil {
		row.Error = err.Error()
	}
	c.logf("%s", row.line())
	c.report.Rows = append(c.report.Rows, row)
}

// dropPageCache empties the kernel page cache (needs root; the report's
// machine line says the run was as root).
func dropPageCache() {
	_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0)
}

// writeTrace saves a link's request log under --out, if given.
func (c *cluster) writeTrace(name string, t *tracedLink) {
	if c.opts.Out == "" {
		return
	}
	if err := os.MkdirAll(c.opts.Out, 0o755); err != nil {
		c.logf("%s: %v", name, err)
		return
	}
	f, err := os.Create(filepath.Join(c.opts.Out, name))
	if err != nil {
		c.logf("%s: %v", name, err)
		return
	}
	defer f.Close()
	if err := t.writeCSV(f); err != nil {
		c.logf("%s: %v", name, err)
	}
}

// write prints the report and writes it under --out.
func (c *cluster) write(stdout io.Writer) error {
	fmt.Fprintln(stdout)
	if err := c.report.WriteMarkdown(stdout); err != nil {
		return err
	}
	if c.opts.Out == "" {
		return nil
	}
	if err := os.MkdirAll(c.opts.Out, 0o755); err != nil {
		return err
	}
	var errs []error
	for name, write := range map[string]func(io.Writer) error{"results.md": c.report.WriteMarkdown, "results.json": c.report.WriteJSON} {
		f, err := os.Create(filepath.Join(c.opts.Out, name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, write(f), f.Close())
	}
	c.logf("wrote results.md, results.json and the request traces to %s", c.opts.Out)
	return errors.Join(errs...)
}
