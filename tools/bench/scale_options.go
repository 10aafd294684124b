package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"ferry/flags"
)

// Sizes of `bench scale`'s files.
const (
	SizesAuto     = "auto"     // ImageNet-like if every tree fits the disk, else tiny
	SizesImageNet = "imagenet" // drawn around ImageNet's mean, ~110 KB
	SizesTiny     = "tiny"     // --tiny-size each, a metadata-only run
)

// ScaleOptions are the command line of `bench scale`.
type ScaleOptions struct {
	// Files is the curve: one tree, mount and set of passes per count.
	Files    []int  `json:"files"`
	Dirs     int    `json:"dirs"`
	Sizes    string `json:"sizes"`
	TinySize int64  `json:"tiny_size"`
	// Flat is the object count of the one-directory dataset (0: none).
	Flat    int    `json:"flat"`
	Readers int    `json:"readers"`
	Seed    uint64 `json:"seed"`
	// GCS also serves the smallest tree from the GCS emulator behind the
	// emulated link.
	GCS       bool     `json:"gcs"`
	DataDir   string   `json:"data_dir"`
	WorkDir   string   `json:"work_dir"`
	Out       string   `json:"out,omitempty"`
	FerryBin  string   `json:"ferry_bin,omitempty"`
	FerryArgs []string `json:"ferry_args,omitempty"`
	// Render re-renders the report of results.json at this path (no
	// measuring): the figures are kept, the targets checked again.
	Render string `json:"-"`
	// KeepData leaves the generated trees for the next run (the default;
	// --keep-data=false removes them at the end).
	KeepData bool `json:"keep_data"`
}

// parseScaleArgs parses the flags after `bench scale`.
func parseScaleArgs(args []string, stderr io.Writer) (ScaleOptions, error) {
	tmp := os.TempDir()
	o := ScaleOptions{Dirs: imagenetDirs, Sizes: SizesAuto, TinySize: 512, Flat: 1_000_000, Readers: 8, Seed: 1, GCS: true, KeepData: true,
		DataDir: filepath.Join(tmp, "ferry-scale-data"), WorkDir: filepath.Join(tmp, "ferry-scale")}
	fs := flag.NewFlagSet("bench scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	files := fs.String("files", "10K,100K,1.28M", "the curve: file counts, comma-separated (K and M are 1e3 and 1e6; 1.28M is ImageNet's 1,281,167)")
	fs.IntVar(&o.Dirs, "dirs", o.Dirs, "directories the files are spread over (ImageNet: 1000)")
	fs.StringVar(&o.Sizes, "sizes", o.Sizes, "file sizes: imagenet (log-normal around 110 KB), tiny (--tiny-size each), or auto (imagenet if every tree and a cache of the largest fit the disk, else tiny)")
	tiny := fs.Bool("tiny", false, "same as --sizes tiny: a metadata-only run")
	fs.Var(sizeFlag{&o.TinySize}, "tiny-size", "size of each file with --sizes tiny")
	flat := fs.String("flat", "1M", "objects in the one-directory dataset listed with ls -l (0: skip it)")
	fs.IntVar(&o.Readers, "readers", o.Readers, "readers of the shuffled read, as a DataLoader's workers")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "dataset seed: sizes, bytes and the shuffled order")
	noGCS := fs.Bool("no-gcs", false, "skip the GCS emulator run at the smallest count")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "where the generated trees live; a tree whose manifest matches is reused")
	fs.BoolVar(&o.KeepData, "keep-data", o.KeepData, "keep the generated trees for the next run")
	fs.StringVar(&o.WorkDir, "work-dir", o.WorkDir, "scratch: ferry caches, mount points, logs, the emulator's objects")
	fs.StringVar(&o.Out, "out", "", "write README.md, results.json and files-per-second.svg to this directory")
	fs.StringVar(&o.FerryBin, "ferry-bin", "", "use this ferry binary instead of building one")
	fs.StringVar(&o.Render, "render", "", "re-render the results.json at this path into --out (or stdout), measuring nothing")
	ferryArgs := fs.String("ferry-args", "", "extra flags for ferry (after --metadata-ttl -1)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if o.Files, err = parseCounts(*files); err != nil {
		return o, fmt.Errorf("--files: %w", err)
	}
	if *flat == "0" {
		o.Flat = 0
	} else if n, err := parseCounts(*flat); err != nil || len(n) != 1 {
		return o, fmt.Errorf("--flat %q: want one count such as 1M, or 0", *flat)
	} else {
		o.Flat = n[0]
	}
	if *tiny {
		o.Sizes = SizesTiny
	}
	o.GCS = !*noGCS
	if o.FerryArgs, err = splitArgs(*ferryArgs); err != nil {
		return o, fmt.Errorf("--ferry-args: %w", err)
	}
	return o, o.validate()
}

// parseCounts parses "10K,100K,1.28M": decimal K and M, and 1.28M as
// ImageNet's exact count. The counts must rise.
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := 1.0
		num := f
		switch {
		case strings.EqualFold(f, "1.28M"):
			out = append(out, imagenetFiles)
			continue
		case strings.HasSuffix(f, "K") || strings.HasSuffix(f, "k"):
			mult, num = 1e3, f[:len(f)-1]
		case strings.HasSuffix(f, "M"):
			mult, num = 1e6, f[:len(f)-1]
		}
		v, err := strconv.ParseFloat(num, 64)
		n := int(v * mult)
		if err != nil || n <= 0 || float64(n) != v*mult {
			return nil, fmt.Errorf("%q: want a positive count such as 10000, 10K or 1.28M", f)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("%q: counts must rise", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func (o ScaleOptions) validate() error {
	switch {
	case len(o.Files) == 0:
		return errors.New("--files: want at least one count")
	case o.Dirs <= 0 || o.Readers <= 0:
		return errors.New("--dirs and --readers must be positive")
	case o.Sizes != SizesAuto && o.Sizes != SizesImageNet && o.Sizes != SizesTiny:
		return fmt.Errorf("--sizes %q: want auto, imagenet or tiny", o.Sizes)
	case o.DataDir == "" || o.WorkDir == "":
		return errors.New("--data-dir and --work-dir must not be empty")
	}
	for _, a := range o.FerryArgs {
		name, _, _ := strings.Cut(a, "=")
		switch name {
		case "--foreground", "--cache-dir", "--metrics-addr", "--metadata-ttl":
			return fmt.Errorf("--ferry-args: %s is set by the benchmark", name)
		}
	}
	_, err := o.memoryLimit()
	return err
}

// memoryLimit is ferry's --memory-limit: from --ferry-args, else the
// flag's default.
func (o ScaleOptions) memoryLimit() (int64, error) {
	opt, ok := flags.Lookup("memory-limit")
	if !ok {
		return 0, errors.New("ferry has no --memory-limit flag")
	}
	v := opt.Default
	for i, a := range o.FerryArgs {
		if a == "--memory-limit" && i+1 < len(o.FerryArgs) {
			v = o.FerryArgs[i+1]
		} else if s, ok := strings.CutPrefix(a, "--memory-limit="); ok {
			v = s
		}
	}
	n, err := flags.ParseSize(v)
	if err != nil {
		return 0, fmt.Errorf("--ferry-args: --memory-limit %q: %w", v, err)
	}
	return n, nil
}

// trees are the datasets of the run, smallest first, with sizes resolved
// (tiny or not): free is the bytes free under --data-dir and --work-dir.
// --sizes imagenet on a disk too small for it is an error before
// anything is written.
func (o ScaleOptions) trees(free int64) (ts []Tree, note string, err error) {
	var need, largest int64
	for _, n := range o.Files {
		b := Tree{Files: n, Dirs: o.Dirs, Seed: o.Seed}.estimateBytes()
		need += b
		largest = max(largest, b)
	}
	// The trees, a cache holding the largest, and room to spare.
	need += largest + spareDisk
	var tiny int64
	switch {
	case o.Sizes == SizesTiny:
		tiny = o.TinySize
	case need <= free:
	case o.Sizes == SizesAuto:
		tiny = o.TinySize
		note = fmt.Sprintf("ImageNet-sized files would need %.0f GiB (every tree, a cache of the largest and 10 GiB spare) and %.0f GiB are free: every tree uses files of %d B (--sizes auto).",
			float64(need)/(1<<30), float64(free)/(1<<30), o.TinySize)
	default:
		return nil, "", fmt.Errorf("--sizes imagenet: the trees, a cache of the largest and 10 GiB spare need %.0f GiB and %.0f GiB are free under --data-dir; use --sizes tiny or fewer files",
			float64(need)/(1<<30), float64(free)/(1<<30))
	}
	for _, n := range o.Files {
		ts = append(ts, Tree{Root: "train", Files: n, Dirs: o.Dirs, Tiny: tiny, Seed: o.Seed})
	}
	return ts, note, nil
}

// spareDisk is what --sizes auto leaves free.
const spareDisk = 10 << 30

// estimateBytes is TotalBytes without drawing every size: the mean,
// rounded up a little for a disk's blocks.
func (t Tree) estimateBytes() int64 {
	if t.Tiny > 0 {
		return int64(t.Files) * max(t.Tiny, 4096)
	}
	return int64(t.Files) * (imagenetMean + 4096)
}

// flatTree is the one-directory dataset.
func (o ScaleOptions) flatTree() Tree {
	return Tree{Root: "flat", Files: o.Flat, Dirs: 1, Tiny: o.TinySize, Seed: o.Seed}
}
