package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"ferry/tools/bench/netem"
)

// ClusterOptions are the command line of `bench cluster`.
type ClusterOptions struct {
	Nodes    int    `json:"nodes"`
	Files    int    `json:"files"`
	FileSize int64  `json:"file_size"`
	Streams  int    `json:"streams"`
	Seed     uint64 `json:"seed"`
	WorkDir  string `json:"work_dir"`
	Out      string `json:"out,omitempty"`
	FerryBin string `json:"ferry_bin,omitempty"`
	// FerryArgs go to every ferry; TierArgs only to the ferries that read
	// through the tier (to try a hint against the same baseline).
	FerryArgs []string `json:"ferry_args,omitempty"`
	TierArgs  []string `json:"tier_args,omitempty"`
	// CacheWait is remote.mount's -cacheWait, or "default" for
	// SeaweedFS's own (by object size).
	CacheWait string `json:"cache_wait,omitempty"`
	// Prewarm fills the tier with remote.cache before node 1 reads.
	Prewarm bool `json:"prewarm"`
	// NoBaseline skips the nodes that read the origin without a tier.
	NoBaseline bool `json:"no_baseline"`

	RTT     time.Duration `json:"rtt"`
	ConnMBs float64       `json:"conn_mb_s"`
	LinkMBs float64       `json:"link_mb_s"`
}

// parseClusterArgs parses the flags after `bench cluster`.
func parseClusterArgs(args []string, stderr io.Writer) (ClusterOptions, error) {
	o := ClusterOptions{
		Nodes: 3, Files: 4, FileSize: 256 << 20, Streams: 4, Seed: 1, CacheWait: "60s",
		WorkDir: filepath.Join(os.TempDir(), "ferry-cluster"),
		RTT:     netem.Default.RTT, ConnMBs: netem.Default.PerConn / 1e6, LinkMBs: netem.Default.Total / 1e6,
	}
	fs := flag.NewFlagSet("bench cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.Nodes, "nodes", o.Nodes, "ferry nodes, each with its own cache and mount point")
	fs.IntVar(&o.Files, "files", o.Files, "files in the dataset")
	fs.Var(sizeFlag{&o.FileSize}, "file-size", "size of each file")
	fs.IntVar(&o.Streams, "streams", o.Streams, "files each node reads at once, front to back")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "dataset seed")
	fs.StringVar(&o.WorkDir, "work-dir", o.WorkDir, "scratch directory: the origin's objects, the tier's volumes, ferry caches, mount points, logs and request traces")
	fs.StringVar(&o.Out, "out", "", "write results.md, results.json and the request traces to this directory")
	fs.StringVar(&o.FerryBin, "ferry-bin", "", "use this ferry binary instead of building one")
	ferryArgs := fs.String("ferry-args", "", "extra flags for every ferry")
	tierArgs := fs.String("tier-ferry-args", "", "extra flags for the ferries that read through the tier only")
	fs.StringVar(&o.CacheWait, "cache-wait", o.CacheWait, "remote.mount -cacheWait: how long a read of an object the tier has not cached yet waits for the tier to cache it whole before it is served from the origin instead (docs/scale-out.md's recipe; \"default\": SeaweedFS's own, 2 to 10 s by object size; 0: never wait)")
	fs.BoolVar(&o.Prewarm, "prewarm", false, "fill the tier with remote.cache before node 1 reads")
	fs.BoolVar(&o.NoBaseline, "no-baseline", false, "skip the ferries that read the origin without a tier")
	fs.DurationVar(&o.RTT, "rtt", o.RTT, "emulated round trip per request to the origin")
	fs.Float64Var(&o.ConnMBs, "conn-mbps", o.ConnMBs, "emulated bandwidth per connection to the origin, MB/s")
	fs.Float64Var(&o.LinkMBs, "link-mbps", o.LinkMBs, "emulated total bandwidth to the origin, MB/s")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if o.FerryArgs, err = splitArgs(*ferryArgs); err != nil {
		return o, fmt.Errorf("--ferry-args: %w", err)
	}
	if o.TierArgs, err = splitArgs(*tierArgs); err != nil {
		return o, fmt.Errorf("--tier-ferry-args: %w", err)
	}
	return o, o.validate()
}

func (o ClusterOptions) validate() error {
	switch {
	case o.Nodes < 2:
		return fmt.Errorf("--nodes %d: want at least 2 (node 1 fills the tier, the others read it)", o.Nodes)
	case o.Files <= 0 || o.Streams <= 0:
		return errors.New("--files and --streams must be positive")
	case o.RTT < 0 || o.ConnMBs < 0 || o.LinkMBs < 0:
		return errors.New("--rtt, --conn-mbps and --link-mbps must not be negative")
	}
	if o.CacheWait != "default" {
		if d, err := time.ParseDuration(o.CacheWait); err != nil || d < 0 {
			return fmt.Errorf("--cache-wait %q: want a duration such as 0, 500ms or 60s, or default", o.CacheWait)
		}
	}
	for _, a := range append(append([]string{}, o.FerryArgs...), o.TierArgs...) {
		name, _, _ := strings.Cut(a, "=")
		switch name {
		case "--foreground", "--cache-dir", "--endpoint", "--anonymous", "--s3-path-style":
			return fmt.Errorf("--ferry-args: %s is set by the benchmark", name)
		}
	}
	return nil
}
