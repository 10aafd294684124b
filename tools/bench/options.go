package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// Options are the command line of `bench demo` and `bench run`.
type Options struct {
	Command string `json:"command"` // "demo" or "run"

	Store     string   `json:"store"`
	WorkDir   string   `json:"work_dir"`
	StoreDir  string   `json:"store_dir,omitempty"`
	DataDir   string   `json:"data_dir"`
	TargetDir string   `json:"target_dir,omitempty"`
	Out       string   `json:"out,omitempty"`
	From      string   `json:"-"`
	FerryBin  string   `json:"ferry_bin,omitempty"`
	FerryArgs []string `json:"ferry_args,omitempty"`
	Workloads []string `json:"workloads"`
	Seed      uint64   `json:"seed"`
	Progress  bool     `json:"progress"`
	Verify    bool     `json:"verify"`
	// Full: the demo prints the full table too, before its short one.
	Full bool `json:"full,omitempty"`
	// Pairs: warm reads of the workloads with a warm target, alternately
	// on local disk and through ferry, this many times each.
	Pairs int `json:"pairs"`

	// The emulated link.
	RTT     time.Duration `json:"rtt"`
	ConnMBs float64       `json:"conn_mb_s"`
	LinkMBs float64       `json:"link_mb_s"`

	// Sequential reads of large files.
	LargeFiles int   `json:"large_files"`
	LargeSize  int64 `json:"large_size"`
	Seq1Files  int   `json:"seq1_files"`
	Streams    int   `json:"streams"`

	// Random records over shard files.
	Shards        int   `json:"shards"`
	ShardSize     int64 `json:"shard_size"`
	RecordSize    int64 `json:"record_size"`
	Records       int   `json:"records"`
	RandomReaders int   `json:"random_readers"`

	// Small files.
	SmallFiles   int   `json:"small_files"`
	SmallSize    int64 `json:"small_size"`
	SmallReaders int   `json:"small_readers"`

	// MLPerf Storage emulation.
	Accelerators  int     `json:"accelerators"`
	MLPerfReaders int     `json:"mlperf_readers"`
	MLPerfScale   float64 `json:"mlperf_sample_scale"`
	UNet3DFiles   int     `json:"unet3d_files"`
	ResNet50Files int     `json:"resnet50_files"`
	CosmoFiles    int     `json:"cosmoflow_files"`

	// A dataset larger than the cache (overcache.go).
	OverCacheFiles  int   `json:"over_cache_files,omitempty"`
	OverCacheSize   int64 `json:"over_cache_size,omitempty"`
	OverCacheEpochs int   `json:"over_cache_epochs,omitempty"`

	// Epochs 1-3 and 2'-3' after a restart on file:// (epochs.go).
	EpochsFiles    int   `json:"epochs_files,omitempty"`
	EpochsSize     int64 `json:"epochs_size,omitempty"`
	EpochsStreams  int   `json:"epochs_streams,omitempty"`
	EpochsRestarts int   `json:"epochs_restarts,omitempty"`

	// A huge sparse object on file:// (huge.go).
	HugeSize    int64 `json:"huge_size,omitempty"`
	HugeRegion  int64 `json:"huge_region,omitempty"`
	HugeRecords int   `json:"huge_records,omitempty"`
}

// allWorkloads in the order they run.
var allWorkloads = []string{"seq-1", "seq-n", "random", "small", "walk", "ls-lr", "unet3d", "resnet50", "cosmoflow", "aio"}

// sizeFlag is an int64 byte count given as a human size ("256MiB").
type sizeFlag struct{ p *int64 }

func (s sizeFlag) String() string {
	if s.p == nil {
		return ""
	}
	return humanize.IBytes(uint64(*s.p))
}

func (s sizeFlag) Set(v string) error {
	n, err := humanize.ParseBytes(v)
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("must be positive")
	}
	*s.p = int64(n)
	return nil
}

// defaultOptions fit a 2-core, 24 GiB machine: an 11 GiB dataset and a
// full run of about 15 minutes.
func defaultOptions(command string) Options {
	o := Options{
		Command:   command,
		Store:     "gcs",
		WorkDir:   filepath.Join(os.TempDir(), "ferry-benchmark"),
		Workloads: allWorkloads,
		Seed:      1,
		Progress:  true,
		Verify:    true,
		Pairs:     6,
		RTT:       30 * time.Millisecond, ConnMBs: 50, LinkMBs: 500,
		LargeFiles: 8, LargeSize: 256 << 20, Seq1Files: 4, Streams: 4,
		Shards: 8, ShardSize: 256 << 20, RecordSize: 512 << 10, Records: 1024, RandomReaders: 4,
		SmallFiles: 4000, SmallSize: 128 << 10, SmallReaders: 8,
		Accelerators: 1, MLPerfReaders: 4, MLPerfScale: 1,
		UNet3DFiles: 28, ResNet50Files: 6, CosmoFiles: 600,
		OverCacheFiles: 192, OverCacheSize: 1 << 20, OverCacheEpochs: 4,
		EpochsFiles: 4, EpochsSize: 256 << 20, EpochsStreams: 1, EpochsRestarts: 3,
		HugeSize: 200 << 30, HugeRegion: 1 << 30, HugeRecords: 512,
	}
	if command == "demo" {
		// A few hundred MiB: one minute on the emulated link, epochs included.
		o.Workloads = []string{"seq-n", "small"}
		o.LargeFiles, o.LargeSize, o.Streams = 4, 48<<20, 4
		o.SmallFiles = 256
		o.Pairs = 0
	}
	return o
}

// parseArgs parses `bench COMMAND [flags]`.
func parseArgs(args []string, stderr io.Writer) (Options, error) {
	if len(args) == 0 {
		return Options{}, errors.New("usage: bench demo|run|generate|render [flags]  (bench run -h for the flags)")
	}
	cmd := args[0]
	switch cmd {
	case "demo", "run", "generate", "render":
	case "-h", "--help", "help":
		return Options{}, flag.ErrHelp
	default:
		return Options{}, fmt.Errorf("unknown command %q: want demo, run, generate or render", cmd)
	}
	o := defaultOptions(cmd)
	fs := flag.NewFlagSet("bench "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Store, "store", o.Store, "emulated store: gcs (fake-gcs-server, the default: less CPU per request) or s3 (versitygw)")
	fs.StringVar(&o.WorkDir, "work-dir", o.WorkDir, "scratch directory: ferry caches, mount points, logs, and the store's objects unless they go to /dev/shm (see --store-dir)")
	fs.StringVar(&o.StoreDir, "store-dir", "", "where the emulator keeps the uploaded objects, in a directory of its own there, removed before and after the run (default /dev/shm when it is a tmpfs with room for them and as much memory again, at least 4 GiB plus ferry's --memory-limit, stays available beside them, so that the emulated store reads no disk and takes no page cache on this machine; else WORK-DIR)")
	fs.StringVar(&o.DataDir, "data-dir", "", "local copy of the dataset (the local-disk baseline; kept between runs) (default WORK-DIR/data-SPEC)")
	fs.StringVar(&o.TargetDir, "target-dir", "", "measure this mounted directory (holding the same dataset, see `bench generate`) instead of mounting ferry")
	fs.StringVar(&o.Out, "out", "", "write results.md, results.json, chart.svg and chart.png to this directory")
	fs.StringVar(&o.From, "from", "", "render: the results.json of an earlier run to render again into --out")
	fs.StringVar(&o.FerryBin, "ferry-bin", "", "use this ferry binary instead of building one")
	ferryArgs := fs.String("ferry-args", "", "extra flags for every ferry mount, e.g. \"--memory-limit 256MiB --max-connections 32\"")
	workloads := fs.String("workloads", strings.Join(o.Workloads, ","), "comma-separated workloads: "+strings.Join(allWorkloads, ","))
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "dataset and random-offset seed")
	noProgress := fs.Bool("no-progress", false, "no progress bar on stderr (there is none when stderr is not a terminal)")
	fs.BoolVar(&o.Full, "full", false, "demo: print the full table (every column, ferry's goals) before the short one")
	fs.IntVar(&o.Pairs, "pairs", o.Pairs, "after the warm phase, read each workload that has a warm target this many times more, alternately on local disk and through ferry; the order swapped every pair, so even; the warm targets use the median ratio of these neighbours in time (the local disk's rate drifts during a run)")
	fs.BoolVar(&o.Verify, "verify", o.Verify, "after the timed phases, compare a sample of the bytes read with the generator")

	fs.DurationVar(&o.RTT, "rtt", o.RTT, "emulated round trip per request")
	fs.Float64Var(&o.ConnMBs, "conn-mbps", o.ConnMBs, "emulated bandwidth per connection, MB/s (10^6 bytes)")
	fs.Float64Var(&o.LinkMBs, "link-mbps", o.LinkMBs, "emulated total link bandwidth, MB/s (10^6 bytes)")

	fs.IntVar(&o.LargeFiles, "large-files", o.LargeFiles, "large files for sequential reads")
	fs.Var(sizeFlag{&o.LargeSize}, "large-size", "size of each large file")
	fs.IntVar(&o.Seq1Files, "seq1-files", o.Seq1Files, "large files read by the 1-stream workload")
	fs.IntVar(&o.Streams, "streams", o.Streams, "streams of the N-stream sequential workload")

	fs.IntVar(&o.Shards, "shards", o.Shards, "shard files for random record reads")
	fs.Var(sizeFlag{&o.ShardSize}, "shard-size", "size of each shard file")
	fs.Var(sizeFlag{&o.RecordSize}, "record-size", "size of one random record read")
	fs.IntVar(&o.Records, "records", o.Records, "random records read in all: distinct records of the shards, in shuffled order (a sample of an epoch)")
	fs.IntVar(&o.RandomReaders, "random-readers", o.RandomReaders, "synchronous random readers")

	fs.IntVar(&o.SmallFiles, "small-files", o.SmallFiles, "small files")
	fs.Var(sizeFlag{&o.SmallSize}, "small-size", "size of each small file")
	fs.IntVar(&o.SmallReaders, "small-readers", o.SmallReaders, "small-file readers")

	fs.IntVar(&o.Accelerators, "accelerators", o.Accelerators, "MLPerf: emulated accelerators per workload")
	fs.IntVar(&o.MLPerfReaders, "mlperf-readers", o.MLPerfReaders, "MLPerf: reader goroutines per accelerator")
	fs.Float64Var(&o.MLPerfScale, "mlperf-scale", o.MLPerfScale, "MLPerf: sample sizes times this (compute times unchanged)")
	fs.IntVar(&o.UNet3DFiles, "unet3d-files", o.UNet3DFiles, "MLPerf: U-Net3D sample files (~140 MiB each)")
	fs.IntVar(&o.ResNet50Files, "resnet50-files", o.ResNet50Files, "MLPerf: ResNet-50 record files (1251 x 115 KiB each)")
	fs.IntVar(&o.CosmoFiles, "cosmoflow-files", o.CosmoFiles, "MLPerf: CosmoFlow sample files (~2.7 MiB each)")
	fs.IntVar(&o.OverCacheFiles, "over-cache-files", o.OverCacheFiles, "over-cache: files of the dataset read over a cache of 1/1.5 and 1/3 of its size")
	fs.Var(sizeFlag{&o.OverCacheSize}, "over-cache-size", "over-cache: size of each file")
	fs.IntVar(&o.OverCacheEpochs, "over-cache-epochs", o.OverCacheEpochs, "over-cache: epochs read on each mount")
	fs.IntVar(&o.EpochsFiles, "epochs-files", o.EpochsFiles, "epochs: files read whole in each epoch")
	fs.Var(sizeFlag{&o.EpochsSize}, "epochs-size", "epochs: size of each file")
	fs.IntVar(&o.EpochsStreams, "epochs-streams", o.EpochsStreams, "epochs: files read at once (1: one after another, as `dd bs=1M` in turn)")
	fs.IntVar(&o.EpochsRestarts, "epochs-restarts", o.EpochsRestarts, "epochs: new ferry processes on the same cache after epoch 3, one after another, each reading epochs 2' and 3'; the restart goal takes the median of their ratios")
	fs.Var(sizeFlag{&o.HugeSize}, "huge-size", "huge: size of the sparse object on file://")
	fs.Var(sizeFlag{&o.HugeRegion}, "huge-region", "huge: bytes written and read sequentially at each of its four offsets (0, a third, two thirds, the end), and the size of the base object it is compared with")
	fs.IntVar(&o.HugeRecords, "huge-records", o.HugeRecords, "huge: random 1 MiB reads of the base object, and as many in each of the huge object's regions")

	if err := fs.Parse(args[1:]); err != nil {
		return Options{}, err
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.Progress = !*noProgress
	var err error
	if o.FerryArgs, err = splitArgs(*ferryArgs); err != nil {
		return Options{}, fmt.Errorf("--ferry-args: %w", err)
	}
	o.Workloads = nil
	for _, w := range strings.Split(*workloads, ",") {
		w = strings.TrimSpace(w)
		if w == "" {
			continue
		}
		if !contains(allWorkloads, w) && w != overCacheName && w != hugeName && w != epochsName {
			return Options{}, fmt.Errorf("--workloads: unknown workload %q (have %s, and %s, %s and %s, not run by default)", w, strings.Join(allWorkloads, ","), overCacheName, hugeName, epochsName)
		}
		o.Workloads = append(o.Workloads, w)
	}
	return o, o.validate()
}

func (o Options) validate() error {
	switch {
	case o.Store != "s3" && o.Store != "gcs":
		return fmt.Errorf("--store %q: want s3 or gcs", o.Store)
	case len(o.Workloads) == 0:
		return errors.New("--workloads: none selected")
	case o.RTT < 0 || o.ConnMBs < 0 || o.LinkMBs < 0:
		return errors.New("--rtt, --conn-mbps and --link-mbps must not be negative")
	case o.LargeFiles <= 0 || o.Seq1Files <= 0 || o.Seq1Files > o.LargeFiles:
		return fmt.Errorf("--seq1-files %d must be between 1 and --large-files %d", o.Seq1Files, o.LargeFiles)
	case o.Streams <= 0 || o.RandomReaders <= 0 || o.SmallReaders <= 0 || o.MLPerfReaders <= 0 || o.Accelerators <= 0:
		return errors.New("--streams, --random-readers, --small-readers, --mlperf-readers and --accelerators must be positive")
	case o.Shards <= 0 || o.Records <= 0 || o.RecordSize > o.ShardSize:
		return fmt.Errorf("--shards and --records must be positive and --record-size (%d) at most --shard-size (%d)", o.RecordSize, o.ShardSize)
	case o.Pairs < 0 || o.Pairs%2 != 0:
		return fmt.Errorf("--pairs %d: want an even number (each order, local disk first and ferry first, runs equally often), 0 for none", o.Pairs)
	case o.SmallFiles <= 0:
		return errors.New("--small-files must be positive")
	case o.MLPerfScale <= 0 || o.MLPerfScale > 1:
		return errors.New("--mlperf-scale must be in (0, 1]")
	case o.UNet3DFiles < 0 || o.ResNet50Files < 0 || o.CosmoFiles < 0:
		return errors.New("MLPerf file counts must not be negative")
	case contains(o.Workloads, overCacheName) && (o.OverCacheFiles <= 0 || o.OverCacheSize <= 0 || o.OverCacheEpochs < 2):
		return errors.New("--over-cache-files and --over-cache-size must be positive and --over-cache-epochs at least 2")
	case contains(o.Workloads, overCacheName) && o.TargetDir != "":
		return fmt.Errorf("--target-dir: %s measures ferry's own cache; it cannot run on another file system", overCacheName)
	case contains(o.Workloads, hugeName) && o.TargetDir != "":
		return fmt.Errorf("--target-dir: %s mounts ferry on a file:// source of its own; it cannot run on another file system", hugeName)
	case contains(o.Workloads, epochsName) && o.TargetDir != "":
		return fmt.Errorf("--target-dir: %s mounts ferry on a file:// source of its own; it cannot run on another file system", epochsName)
	case contains(o.Workloads, epochsName) && (o.EpochsFiles <= 0 || o.EpochsStreams <= 0 || o.EpochsRestarts <= 0):
		return errors.New("--epochs-files, --epochs-streams and --epochs-restarts must be positive")
	case contains(o.Workloads, epochsName) && slices.ContainsFunc(o.FerryArgs, func(a string) bool { return a == "--metrics-addr" || strings.HasPrefix(a, "--metrics-addr=") }):
		return fmt.Errorf("--ferry-args: %s reads ferry's counters from a --metrics-addr of its own", epochsName)
	case contains(o.Workloads, hugeName) && o.HugeRecords <= 0:
		return errors.New("--huge-records must be positive")
	case o.Command == "generate" && o.DataDir == "":
		return errors.New("generate: --data-dir is where the dataset is written")
	case o.Command == "render" && (o.From == "" || o.Out == ""):
		return errors.New("render: --from results.json and --out DIR are required")
	}
	if contains(o.Workloads, hugeName) {
		if _, err := hugeRegions(o.HugeSize, o.HugeRegion); err != nil {
			return err
		}
	}
	for _, a := range o.FerryArgs {
		switch a {
		case "--foreground", "--cache-dir", "--endpoint":
			return fmt.Errorf("--ferry-args: %s is set by the benchmark", a)
		}
		for _, f := range []string{"--foreground=", "--cache-dir=", "--endpoint="} {
			if strings.HasPrefix(a, f) {
				return fmt.Errorf("--ferry-args: %s is set by the benchmark", strings.TrimSuffix(f, "="))
			}
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// splitArgs splits a command-line fragment on blanks, honouring single
// and double quotes (no variables, no escapes but \" inside double quotes).
func splitArgs(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inArg := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case quote == '"':
			switch {
			case c == '"':
				quote = 0
			case c == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\'):
				i++
				cur.WriteByte(s[i])
			default:
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, inArg = c, true
		case c == ' ' || c == '\t' || c == '\n':
			if inArg {
				out = append(out, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote in %q", quote, s)
	}
	if inArg {
		out = append(out, cur.String())
	}
	return out, nil
}
