package flags

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
)

// Config is the parsed, validated command line. Paths are absolute, so the
// background child may change its working directory.
type Config struct {
	// Source is the store URL: gs://bucket[/prefix], s3://bucket[/prefix]
	// or file:///abs/dir.
	Source string
	// MountPoint is the absolute path of the directory to mount on.
	MountPoint string

	// ConfigFile is --config-file, already read: kept so that the
	// background child reads the same file.
	ConfigFile string
	Foreground bool
	// NonEmpty allows mounting over a non-empty directory.
	NonEmpty bool

	// Store.
	Endpoint       string
	Anonymous      bool
	Region         string
	S3PathStyle    bool
	KeyFile        string
	BillingProject string
	MaxConnections int
	// StoreTimeout bounds each wait on the store (headers, next body
	// bytes); RetryMaxTime bounds the retries of one failing request.
	StoreTimeout time.Duration
	RetryMaxTime time.Duration

	// Metadata cache; Forever (-1) never expires, 0 is off.
	MetadataTTL time.Duration
	NegativeTTL time.Duration

	// Ownership and permissions of every inode.
	Uid, Gid   uint32
	FileMode   os.FileMode
	DirMode    os.FileMode
	AllowOther bool

	// Local disk cache; off when CacheDir is "".
	CacheDir string
	// CacheSize is the cache's maximum size in bytes; 0 lets filecache
	// choose (see CacheBudget).
	CacheSize int64
	// CacheMinFree is the free-space floor on the cache file system, in
	// bytes, or as CacheMinFreePercent of its size when that is non-zero.
	CacheMinFree        int64
	CacheMinFreePercent float64
	CacheBlockSize      int64
	// CachePassthrough: objects held whole in the cache are read by the
	// kernel from their cache files (fs/passthrough.go).
	CachePassthrough bool

	// Memory and kernel.
	MemoryLimit int64
	// MetadataLimit bounds the metadata's memory (names, listings, the
	// kernel's inodes); 0 is no bound.
	MetadataLimit int64
	// ReadAheadFiles: start the next file of a directory read in listing
	// order before its reader opens it (readahead.Files).
	ReadAheadFiles bool
	ReadAheadKB    int
	// MaxBackground is the kernel's limit on async FUSE requests (0 keeps
	// the kernel's default).
	MaxBackground int
	// KernelOptions are generic mount flags passed to the kernel (nodev,
	// noexec, ...), in the form jacobsa/fuse's MountConfig.Options expects.
	KernelOptions []string

	// Logging and metrics.
	LogFile   string
	LogFormat string // "text" or "json"
	LogLevel  string // one of LogLevels
	Debug     bool
	// MetricsLabels are --metrics-label's KEY=VALUE pairs, in order.
	MetricsLabels [][2]string
	MetricsAddr   string
	// ControlSocket is the control socket's path; "" picks the default.
	ControlSocket string
}

// Limits used by validation.
const (
	// MinMemoryLimit: readahead itself needs four parts of its 4 MiB
	// default part size; below 32 MiB a stream's window (at most half
	// the budget) would be too small to keep a link busy.
	MinMemoryLimit = 32 << 20
	// MinMetadataLimit: a few thousand names.
	MinMetadataLimit = 4 << 20
	MinBlockSize     = 4 << 10
	MaxBlockSize     = 16 << 20
	MaxConnections   = 1024
	// MaxReadAheadKB is 1 GiB, far beyond what the kernel ever uses.
	MaxReadAheadKB = 1 << 20
	// MaxBackground: each async request holds up to a 1 MiB reply.
	MaxBackground = 1024
)

// KernelMountOptions are the generic mount(8) options ferry passes to the
// kernel unchanged (they are handled by mount(2) flags, not by ferry).
// relatime is not here: it is the kernel's default and the FUSE driver
// rejects it as a data option, so ParseMountOptions drops it.
var KernelMountOptions = []string{"dev", "nodev", "suid", "nosuid", "exec", "noexec", "atime", "noatime"}

// FromContext parses and validates the options and the two positional
// arguments of an urfave/cli context built with CLIFlags.
func FromContext(c *cli.Context) (*Config, error) {
	src, err := readSources(os.Environ(), c.String("config-file"))
	if err != nil {
		return nil, err
	}
	isSet := func(name string) bool {
		o, _ := Lookup(name)
		_, ok := src.lookup(o)
		return c.IsSet(name) || ok
	}
	cfg := &Config{}
	for i := range Options {
		o := &Options[i]
		var raws []string
		var from string
		v, fromSource := src.lookup(o)
		switch {
		case c.IsSet(o.Name) && o.Kind == Bool:
			raws = []string{strconv.FormatBool(c.Bool(o.Name))}
		case c.IsSet(o.Name) && o.Kind == List:
			raws = c.StringSlice(o.Name)
		case c.IsSet(o.Name):
			raws = []string{c.String(o.Name)}
		case fromSource:
			raws, from = v.raws, v.from
		case o.Kind != List:
			raws = []string{o.Default}
		}
		for _, raw := range raws {
			if err := setFrom(o, cfg, raw, from); err != nil {
				return nil, err
			}
		}
	}
	if err := cfg.validate(isSet); err != nil {
		return nil, err
	}

	args := c.Args().Slice()
	if len(args) != 2 {
		return nil, Invalidf("need SOURCE and MOUNTPOINT, got %d argument(s) (usage: ferry [flags] gs://bucket[/prefix] /mnt/dir)", len(args))
	}
	if err := cfg.setSource(args[0], isSet); err != nil {
		return nil, err
	}
	if _, ok := FuseFD(args[1]); ok {
		// A /dev/fuse opened and mounted by a privileged helper: this
		// process's descriptor, which a background child would not have.
		cfg.MountPoint, cfg.Foreground = args[1], true
		return cfg, nil
	} else if strings.HasPrefix(args[1], "/dev/fd/") {
		return nil, fmt.Errorf("%w: mount point %q: use /dev/fd/N with N a descriptor number", ErrInvalid, args[1])
	}
	mp, err := filepath.Abs(args[1])
	if err != nil {
		return nil, Invalidf("mount point %q: %v", args[1], err)
	}
	cfg.MountPoint = resolvePath(mp)
	for _, p := range []struct{ name, path string }{
		{"cache-dir", cfg.CacheDir}, {"control-socket", cfg.ControlSocket},
	} {
		if p.path != "" && within(resolvePath(p.path), cfg.MountPoint) {
			return nil, optionErr(p.name, "%s is inside the mount point %s, which the mount hides", p.path, cfg.MountPoint)
		}
	}
	return cfg, nil
}

// FuseFD reports whether a mount point is /dev/fd/N, an open /dev/fuse
// already mounted by a privileged helper (Kubernetes CSI drivers do this
// for unprivileged pods), and N.
func FuseFD(mountPoint string) (int, bool) {
	n, ok := strings.CutPrefix(mountPoint, "/dev/fd/")
	if !ok {
		return 0, false
	}
	fd, err := strconv.Atoi(n)
	return fd, err == nil && fd >= 0 && strconv.Itoa(fd) == n
}

// setFrom sets one raw value of o; from is where it came from, "" for the
// command line, where urfave/cli has already parsed a switch.
func setFrom(o *Option, cfg *Config, raw, from string) error {
	var err error
	if o.Kind == Bool && from != "" {
		raw, err = parseBool(raw)
	}
	if err == nil {
		err = o.set(cfg, raw)
	}
	if err != nil {
		return &OptionError{Option: o.Name, Value: raw, From: from, Err: err}
	}
	return nil
}

// resolvePath follows symlinks in the absolute path p as far as they
// exist, without touching p itself unless it is a symlink: p may be a
// dead FUSE mount (stat fails with ENOTCONN) or not exist yet. So a mount
// point reached through a symlink is recognised in /proc/self/mountinfo,
// and a cache dir inside the mount point is seen through any alias.
func resolvePath(p string) string {
	for range 40 { // as many links as the kernel follows
		dir := filepath.Dir(p)
		if d, err := filepath.EvalSymlinks(dir); err == nil {
			dir = d
		} else if dir != p {
			dir = resolvePath(dir) // a parent that does not exist yet
		}
		p = filepath.Join(dir, filepath.Base(p))
		target, err := os.Readlink(p)
		if err != nil {
			return p // not a symlink (or nothing there yet)
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(dir, target)
		}
		p = filepath.Clean(target)
	}
	return p
}

// within reports whether path is dir or below it (both clean and absolute).
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// validate checks rules that involve more than one option. isSet reports
// whether the user gave an option explicitly.
func (cfg *Config) validate(isSet func(string) bool) error {
	if cfg.CacheDir == "" {
		// A size without a directory means the user believes there is a
		// cache; failing is kinder than silently reading from the network.
		for _, name := range []string{"cache-size", "cache-min-free", "cache-block-size"} {
			if isSet(name) {
				return optionErr(name, "needs --cache-dir (there is no disk cache without it)")
			}
		}
	}
	// Readahead parts are whole cache blocks: with large blocks, four
	// parts (what readahead needs at least) outgrow a small limit.
	if part := max(cfg.CacheBlockSize, 4<<20); cfg.CacheDir != "" && cfg.MemoryLimit < 4*part {
		return optionErr("memory-limit", "%s is below four readahead parts of %s (with --cache-block-size %s); give at least %s",
			humanSize(cfg.MemoryLimit), humanSize(part), humanSize(cfg.CacheBlockSize), humanSize(4*part))
	}
	if total := totalMemory(); total > 0 && uint64(cfg.MemoryLimit) > total {
		return optionErr("memory-limit", "%s is more than this machine's %s of memory",
			humanSize(cfg.MemoryLimit), humanSize(int64(total)))
	}
	return nil
}

// setSource checks the store URL's shape (connect.Open does the rest) and
// that store-specific options match the store.
func (cfg *Config) setSource(raw string, isSet func(string) bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return Invalidf("source %q is not a URL (use gs://bucket[/prefix], s3://bucket[/prefix] or file:///dir)", raw)
	}
	switch u.Scheme {
	case "gs", "s3":
		if u.Host == "" {
			return Invalidf("source %q has no bucket name", raw)
		}
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return Invalidf("source %q: a file URL needs an absolute path (file:///dir)", raw)
		}
		if !strings.HasPrefix(u.Path, "/") {
			return Invalidf("source %q: a file URL needs an absolute path (file:///dir)", raw)
		}
	default:
		return Invalidf("source %q: unknown scheme %q (use gs://, s3:// or file://)", raw, u.Scheme)
	}
	storeOnly := map[string]string{
		"region": "s3", "s3-path-style": "s3",
		"key-file": "gs", "billing-project": "gs",
	}
	for name, scheme := range storeOnly {
		if isSet(name) && u.Scheme != scheme {
			return optionErr(name, "only applies to %s:// sources, not %s", scheme, raw)
		}
	}
	if u.Scheme == "file" {
		for _, name := range []string{"endpoint", "anonymous"} {
			if isSet(name) {
				return optionErr(name, "does not apply to file:// sources")
			}
		}
	}
	cfg.Source = raw
	return nil
}

// CacheBudget turns the cache options into the byte limits filecache.Config
// wants, given the total size of the file system holding CacheDir: a
// percentage --cache-min-free is resolved against it. A zero --cache-size
// stays 0, which filecache reads as "automatic" (80% of the free space at
// start plus what the cache already holds).
func (cfg *Config) CacheBudget(fsTotal uint64) (maxSize, minFree int64) {
	minFree = cfg.CacheMinFree
	if cfg.CacheMinFreePercent > 0 {
		minFree = int64(float64(fsTotal) * cfg.CacheMinFreePercent / 100)
	}
	return cfg.CacheSize, minFree
}

// totalMemory is the machine's RAM in bytes, or 0 when unknown.
func totalMemory() uint64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}

// absPath makes a path option absolute; "" stays "".
func absPath(dst *string, raw string) error {
	if raw == "" {
		*dst = ""
		return nil
	}
	p, err := filepath.Abs(raw)
	if err != nil {
		return err
	}
	*dst = p
	return nil
}

// checkHostPort accepts "host:port" and ":port".
func checkHostPort(s string) error {
	if _, port, err := net.SplitHostPort(s); err != nil || port == "" {
		return fmt.Errorf("%q is not host:port (use e.g. localhost:9101 or :9101)", s)
	}
	return nil
}
