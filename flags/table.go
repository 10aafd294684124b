package flags

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Options is THE table. Order is the order of help and docs.
var Options = []Option{
	// Mount.
	{Name: "config-file", Placeholder: "PATH", Fstab: "config_file", Kind: String, Category: catMount,
		Usage: "read options from this YAML file, keyed by flag name (cache-dir: /ssd/ferry); the command line (or mount -o) wins over FERRY_ variables, which win over the file",
		set:   func(c *Config, s string) error { return absPath(&c.ConfigFile, s) }},
	{Name: "foreground", Fstab: "foreground", Kind: Bool, Default: "false", Category: catMount,
		Usage: "stay attached to the terminal and log to stderr instead of running in the background",
		set:   func(c *Config, s string) error { c.Foreground = s == "true"; return nil }},
	{Name: "allow-other", Fstab: "allow_other", Kind: Bool, Default: "false", Category: catMount,
		Usage: "let users other than the one who mounted access the file system (needs user_allow_other in /etc/fuse.conf when not root)",
		set:   func(c *Config, s string) error { c.AllowOther = s == "true"; return nil }},
	{Name: "ro", Fstab: "ro", Kind: Bool, Default: "true", Category: catMount,
		Usage: "mount read-only; accepted for fstab compatibility, ferry mounts are always read-only",
		set: func(c *Config, s string) error {
			if s != "true" {
				return fmt.Errorf("ferry mounts are always read-only")
			}
			return nil
		}},
	{Name: "kernel-option", Fstab: "kernel_option", Kind: List, Category: catMount,
		Usage: "generic mount flag for the kernel (dev, nodev, suid, nosuid, exec, noexec, atime, noatime), repeatable; in fstab write nodev, nosuid, noexec and noatime bare, the others as kernel_option=suid (mount(8) does not pass them on). A ferry mount is nodev,nosuid unless told otherwise; of a pair, the last given wins",
		set: func(c *Config, s string) error {
			if !slices.Contains(KernelMountOptions, s) {
				return fmt.Errorf("%q is not a kernel mount option ferry passes on (allowed: %v)", s, KernelMountOptions)
			}
			c.KernelOptions = append(c.KernelOptions, s)
			return nil
		}},
	{Name: "nonempty", Fstab: "nonempty", Kind: Bool, Default: "false", Category: catMount,
		Usage: "allow mounting over a directory that is not empty (its files are hidden while mounted)",
		set:   func(c *Config, s string) error { c.NonEmpty = s == "true"; return nil }},
	{Name: "max-background", Fstab: "max_background", Kind: Int, Default: "64", Category: catMount,
		Usage: "kernel's limit on FUSE reads in flight for readahead (and its congestion threshold, 3/4 of it), given to the kernel at mount time; 0 keeps the kernel's 12",
		set: func(c *Config, s string) error {
			n, err := parseInt(s, 0, MaxBackground)
			c.MaxBackground = int(n)
			return err
		}},
	{Name: "read-ahead-kb", Fstab: "read_ahead_kb", Kind: Int, Default: "1024", Category: catMount,
		Usage: "kernel readahead for the mount in KiB (0 keeps the kernel's default)",
		set: func(c *Config, s string) error {
			n, err := parseInt(s, 0, MaxReadAheadKB)
			c.ReadAheadKB = int(n)
			return err
		}},

	// Store.
	{Name: "endpoint", Placeholder: "URL", Fstab: "endpoint", Kind: String, Category: catStore,
		Usage: "store endpoint URL instead of the default one, e.g. an emulator, MinIO or an S3-speaking cache tier (http://host:port)",
		set: func(c *Config, s string) error {
			if s != "" {
				u, err := url.Parse(s)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return fmt.Errorf("%q is not an http(s) URL (use e.g. http://localhost:9000)", s)
				}
			}
			c.Endpoint = s
			return nil
		}},
	{Name: "anonymous", Fstab: "anonymous", Kind: Bool, Default: "false", Category: catStore,
		Usage: "send no credentials (public buckets)",
		set:   func(c *Config, s string) error { c.Anonymous = s == "true"; return nil }},
	{Name: "region", Placeholder: "REGION", Fstab: "region", Kind: String, Category: catStore,
		Usage: "S3 region (default: from the AWS environment/config)",
		set:   func(c *Config, s string) error { c.Region = s; return nil }},
	{Name: "s3-path-style", Fstab: "s3_path_style", Kind: Bool, Default: "false", Category: catStore,
		Usage: "address S3 buckets as endpoint/bucket instead of bucket.endpoint (MinIO and most S3-compatible stores)",
		set:   func(c *Config, s string) error { c.S3PathStyle = s == "true"; return nil }},
	{Name: "key-file", Placeholder: "PATH", Fstab: "key_file", Kind: String, Category: catStore,
		Usage: "GCS service-account JSON key (default: application default credentials)",
		set: func(c *Config, s string) error {
			if err := absPath(&c.KeyFile, s); err != nil {
				return err
			}
			if c.KeyFile != "" {
				if _, err := os.Stat(c.KeyFile); err != nil {
					return fmt.Errorf("cannot read key file: %w", err)
				}
			}
			return nil
		}},
	{Name: "billing-project", Placeholder: "PROJECT", Fstab: "billing_project", Kind: String, Category: catStore,
		Usage: "GCS project billed for requester-pays buckets",
		set:   func(c *Config, s string) error { c.BillingProject = s; return nil }},
	{Name: "max-connections", Fstab: "max_connections", Kind: Int, Default: "32", Category: catPerf,
		Usage: "most concurrent requests to the store",
		set: func(c *Config, s string) error {
			n, err := parseInt(s, 1, MaxConnections)
			c.MaxConnections = int(n)
			return err
		}},
	{Name: "store-timeout", Fstab: "store_timeout", Kind: Duration, Default: "20s", Category: catStore,
		Usage: "longest wait for the store's answer, or for the next bytes of a read, before the request is retried; a read that gets less than 64KiB in this much waiting (at least 30s) is retried too (a store that trickles)",
		set: func(c *Config, s string) (err error) {
			c.StoreTimeout, err = parsePositiveDuration(s)
			return err
		}},
	{Name: "retry-max-time", Fstab: "retry_max_time", Kind: Duration, Default: "30s", Category: catStore,
		Usage: "how long a failing store request is retried before it fails with EIO; once one has spent it, the store counts as down, and requests fail at once until a probe (every second) finds it answering",
		set: func(c *Config, s string) (err error) {
			c.RetryMaxTime, err = parsePositiveDuration(s)
			return err
		}},
	{Name: "memory-limit", Fstab: "memory_limit", Kind: Size, Default: "512MiB", Category: catPerf,
		Usage: "most memory for read buffers (readahead and in-flight reads); when full, ferry reads ahead less",
		set: func(c *Config, s string) error {
			n, err := ParseSize(s)
			if err != nil {
				return err
			}
			if n < MinMemoryLimit {
				return fmt.Errorf("%s is below the minimum of %s", humanSize(n), humanSize(MinMemoryLimit))
			}
			c.MemoryLimit = n
			return nil
		}},
	{Name: "read-ahead-files", Fstab: "read_ahead_files", Kind: Bool, Default: "true", Category: catPerf,
		Usage: "when files of a directory are read in listing order, fetch ahead: for large files (8MiB and more, three in a row, or from the first file on, opened first), the first window of the next one (at most 64MiB) while the current one finishes; for smaller ones (opens following the listing), the next 16 files whole; a file nobody opens within 30s is dropped; =false turns it off",
		set:   func(c *Config, s string) error { c.ReadAheadFiles = s == "true"; return nil }},

	// Metadata.
	{Name: "metadata-ttl", Fstab: "metadata_ttl", Kind: Duration, Default: "60s", Category: catMeta,
		Usage: "how long names, sizes and listings are cached; -1 caches forever (datasets that never change), 0 turns the cache off",
		set: func(c *Config, s string) (err error) {
			c.MetadataTTL, err = ParseTTL(s)
			return err
		}},
	{Name: "negative-ttl", Fstab: "negative_ttl", Kind: Duration, Default: "5s", Category: catMeta,
		Usage: "how long \"no such file\" answers are cached; -1 forever, 0 off",
		set: func(c *Config, s string) (err error) {
			c.NegativeTTL, err = ParseTTL(s)
			return err
		}},

	{Name: "metadata-limit", Fstab: "metadata_limit", Kind: Size, Default: "256MiB", Category: catMeta,
		Usage: "most memory for metadata: cached names and listings (about 80 bytes a name listed) and the inodes the kernel holds (about 350 bytes each, up to half of it); past it, ferry drops cached names at random, to be asked of the store again whatever --metadata-ttl, and asks the kernel to forget names; 0 is no bound",
		set: func(c *Config, s string) error {
			n, err := ParseSize(s)
			if err != nil {
				return err
			}
			if n != 0 && n < MinMetadataLimit {
				return fmt.Errorf("%s is below the minimum of %s (0 is no bound)", humanSize(n), humanSize(MinMetadataLimit))
			}
			c.MetadataLimit = n
			return nil
		}},

	// Ownership and permissions.
	{Name: "uid", Placeholder: "UID", Fstab: "uid", Kind: Int, DefaultDoc: "uid running ferry", Category: catPerms,
		Usage: "owner of every file and directory",
		set: func(c *Config, s string) error {
			n, err := idOrSelf(s, os.Getuid())
			c.Uid = n
			return err
		}},
	{Name: "gid", Placeholder: "GID", Fstab: "gid", Kind: Int, DefaultDoc: "gid running ferry", Category: catPerms,
		Usage: "group of every file and directory",
		set: func(c *Config, s string) error {
			n, err := idOrSelf(s, os.Getgid())
			c.Gid = n
			return err
		}},
	{Name: "file-mode", Fstab: "file_mode", Kind: Mode, Default: "0444", Category: catPerms,
		Usage: "permission bits of files",
		set: func(c *Config, s string) error {
			m, err := ParseMode(s)
			c.FileMode = os.FileMode(m)
			return err
		}},
	{Name: "dir-mode", Fstab: "dir_mode", Kind: Mode, Default: "0555", Category: catPerms,
		Usage: "permission bits of directories",
		set: func(c *Config, s string) error {
			m, err := ParseMode(s)
			c.DirMode = os.FileMode(m)
			return err
		}},

	// Local disk cache.
	{Name: "cache-dir", Placeholder: "PATH", Fstab: "cache_dir", Kind: String, Category: catCache,
		Usage: "directory for the local disk cache (an SSD); no disk cache without it",
		set:   func(c *Config, s string) error { return absPath(&c.CacheDir, s) }},
	{Name: "cache-size", Fstab: "cache_size", Kind: Size, Default: "0", DefaultDoc: "0 (automatic)", Category: catCache,
		Usage: "most bytes the disk cache may hold, at least one cache block; 0 or empty takes 80% of the cache file system's free space at start plus what the cache already holds (--cache-min-free still applies)",
		set: func(c *Config, s string) (err error) {
			c.CacheSize, err = ParseSize(s)
			return err
		}},
	{Name: "cache-min-free", Fstab: "cache_min_free", Kind: SizeOrPercent, Default: "5GiB", Category: catCache,
		Usage: "free space to leave on the cache file system, as a size or a percentage of it (10%); the cache evicts to keep it. A floor at or above the file system's size is refused (on a volume under 5GiB, give a percentage)",
		set: func(c *Config, s string) (err error) {
			c.CacheMinFree, c.CacheMinFreePercent, err = ParseSizeOrPercent(s)
			return err
		}},
	{Name: "cache-block-size", Fstab: "cache_block_size", Kind: Size, Default: "64KiB", Category: catCache,
		// 64KiB: a 512KiB record at a random offset then fetches ~1.125x
		// its size; 128KiB would be ~1.25x, too close to our 1.3x bound.
		Usage: "unit of caching and checksumming on disk (power of two, 4KiB to 16MiB); changing it empties the cache",
		set: func(c *Config, s string) error {
			n, err := ParseSize(s)
			if err != nil {
				return err
			}
			if n < MinBlockSize || n > MaxBlockSize || n&(n-1) != 0 {
				return fmt.Errorf("%s is not a power of two between %s and %s", humanSize(n), humanSize(MinBlockSize), humanSize(MaxBlockSize))
			}
			c.CacheBlockSize = n
			return nil
		}},
	{Name: "cache-passthrough", Fstab: "cache_passthrough", Kind: Bool, Default: "true", Category: catCache,
		Usage: "an object held whole in the disk cache is read by the kernel straight from its cache file (FUSE passthrough: Linux 6.9 or later, ferry running as root), not through ferry; each such file's blocks are checked against their CRC32Cs at its first open in the mount (over 1GiB: by reads through ferry covering it whole, once it is cached whole) and again at an open after the file changed, not at every read. Likewise, in files cached in part, blocks already read and checked in the mount are sent from the cache file without ferry reading them again (spliced), and files read at random are opened without the kernel's FUSE page cache (direct I/O, Linux 6.6 or later); =false sends every read through ferry, which checks each block read from disk",
		set:   func(c *Config, s string) error { c.CachePassthrough = s == "true"; return nil }},

	// Logging and metrics.
	{Name: "log-file", Placeholder: "PATH", Fstab: "log_file", Kind: String, DefaultDoc: "stderr in the foreground; syslog in the background, or without a syslog socket /var/log/ferry.log (another user: ~/.local/state/ferry/ferry.log)", Category: catLogging,
		Usage: "write logs to this file (appended, created 0600); SIGHUP reopens it, for logrotate",
		set:   func(c *Config, s string) error { return absPath(&c.LogFile, s) }},
	{Name: "log-level", Placeholder: "error|warn|info|debug", Fstab: "log_level", Kind: String, Default: "info", Category: catLogging,
		Usage: "least severe messages logged",
		set: func(c *Config, s string) error {
			if !slices.Contains(LogLevels, s) {
				return fmt.Errorf("%q is not a log level (use error, warn, info or debug)", s)
			}
			c.LogLevel = s
			return nil
		}},
	{Name: "log-format", Placeholder: "text|json", Fstab: "log_format", Kind: String, Default: "text", Category: catLogging,
		Usage: "log format: text or json",
		set: func(c *Config, s string) error {
			if s != "text" && s != "json" {
				return fmt.Errorf("%q is not a log format (use text or json)", s)
			}
			c.LogFormat = s
			return nil
		}},
	{Name: "debug", Fstab: "debug", Kind: Bool, Default: "false", Category: catLogging,
		Usage: "log at debug level (--log-level debug), and every FUSE operation too; with a loopback --metrics-addr, also serve Go profiles at /debug/pprof",
		set:   func(c *Config, s string) error { c.Debug = s == "true"; return nil }},
	{Name: "metrics-addr", Placeholder: "HOST:PORT", Fstab: "metrics_addr", Kind: String, DefaultDoc: "off", Category: catLogging,
		Usage: "serve Prometheus metrics on host:port at /metrics",
		set: func(c *Config, s string) error {
			if s != "" {
				if err := checkHostPort(s); err != nil {
					return err
				}
			}
			c.MetricsAddr = s
			return nil
		}},
	{Name: "metrics-label", Placeholder: "KEY=VALUE", Fstab: "metrics_label", Kind: List, Category: catLogging,
		Usage: "add this label to every series ferry exports, beside source (the bucket URL) and mountpoint, which are always there; repeatable (--metrics-label node=gpu-17 --metrics-label job_id=42)",
		set: func(c *Config, s string) error {
			k, v, ok := strings.Cut(s, "=")
			switch {
			case !ok || !labelName.MatchString(k):
				return fmt.Errorf("%q is not KEY=VALUE with a Prometheus label name as KEY (letters, digits and _)", s)
			case strings.HasPrefix(k, "__") || slices.Contains(ReservedLabels, k):
				return fmt.Errorf("label %q is ferry's own or Prometheus's (ferry uses %s)", k, strings.Join(ReservedLabels, ", "))
			case slices.ContainsFunc(c.MetricsLabels, func(l [2]string) bool { return l[0] == k }):
				return fmt.Errorf("label %q is given twice", k)
			}
			c.MetricsLabels = append(c.MetricsLabels, [2]string{k, v})
			return nil
		}},
	{Name: "control-socket", Placeholder: "PATH", Fstab: "control_socket", Kind: String, DefaultDoc: "/run/ferry/HASH.sock (HASH from the mount point); as another user $XDG_RUNTIME_DIR/ferry/HASH.sock, /run/user/UID/ferry/HASH.sock, or the abstract socket @ferry/UID/HASH", Category: catLogging,
		Usage: "unix socket (0600) on which `ferry invalidate` reaches this mount; ferry warm and invalidate look for it at the default path, which is linked to this one",
		set:   func(c *Config, s string) error { return absPath(&c.ControlSocket, s) }},
}

// LogLevels are --log-level's values, least verbose first.
var LogLevels = []string{"error", "warn", "info", "debug"}

// ReservedLabels are the label names of ferry's own series (and the Go
// collector's), which --metrics-label must not take: a series with a
// label twice cannot be registered.
var ReservedLabels = []string{"source", "mountpoint", "op", "errno", "kind", "version", "revision", "goversion", "le", "quantile"}

// labelName is a Prometheus label name.
var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// parsePositiveDuration parses a duration (20s, 1m30s, or seconds) that
// is neither 0 nor forever: a store wait must end.
func parsePositiveDuration(s string) (time.Duration, error) {
	d, err := ParseTTL(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration (use e.g. 20s or 1m)", s)
	}
	return d, nil
}

// idOrSelf parses a uid/gid; "" (the default) is self.
func idOrSelf(s string, self int) (uint32, error) {
	if s == "" {
		return uint32(self), nil
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 {
		// 2^32-1 is (uid_t)-1, "no change" to the kernel.
		return 0, fmt.Errorf("%q is not a uid/gid (use a number, e.g. 1000)", s)
	}
	return uint32(n), nil
}
