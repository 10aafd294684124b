package flags

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// Forever is the TTL that never expires (written -1 on the command line).
// It matches fs.Config's "-1 forever".
const Forever time.Duration = -1

// ErrInvalid is wrapped by every validation error, for errors.Is.
var ErrInvalid = errors.New("invalid option")

// OptionError is an error about one option. Its message starts with the
// option as the user wrote it: `--cache-size: "12 parsecs" is not a size
// (use e.g. 200GiB)` on the command line, `-o cache_size=12parsecs: not a
// size (use e.g. 200GiB)` when it came from mount -o or /etc/fstab.
type OptionError struct {
	Option string // flag name without dashes, e.g. "cache-size"
	// Value is the value the error is about, as given; "" when the error
	// is about the option beside others.
	Value string
	// Mount: the option came from mount -o (see AsMountOption).
	Mount bool
	// From says where a value that did not come from the command line
	// was found: "FERRY_CACHE_SIZE", "config file /etc/ferry.yaml".
	From string
	Err  error
}

func (e *OptionError) Error() string {
	if !e.Mount && e.From != "" {
		return "--" + e.Option + " (" + e.From + "): " + e.Err.Error()
	}
	if !e.Mount {
		return "--" + e.Option + ": " + e.Err.Error()
	}
	written := e.Option
	if o, ok := Lookup(e.Option); ok {
		written = o.Fstab
	}
	msg := e.Err.Error()
	if e.Value != "" {
		written += "=" + e.Value
		// The value is named once, in what was written.
		if rest, ok := strings.CutPrefix(msg, strconv.Quote(e.Value)+" is "); ok {
			msg = rest
		}
	}
	// Other options it names are spelled as in -o too.
	msg = flagMention.ReplaceAllStringFunc(msg, func(f string) string {
		if o, ok := Lookup(f[2:]); ok {
			return o.Fstab
		}
		return f
	})
	return "-o " + written + ": " + msg
}

// flagMention is a long flag named in a message: "--cache-dir".
var flagMention = regexp.MustCompile(`--[a-z][-a-z0-9]*`)

func (e *OptionError) Unwrap() []error { return []error{e.Err, ErrInvalid} }

// AsMountOption makes the *OptionError in err, if any, name its option as
// mount -o spells it (memory_limit=lots rather than --memory-limit), for
// mount(8)'s helper, whose every option came from -o. It returns err.
func AsMountOption(err error) error {
	var oe *OptionError
	if errors.As(err, &oe) {
		oe.Mount = true
	}
	return err
}

// invalidError is a command-line error about no one option (the
// arguments, the -o syntax): it matches ErrInvalid, and its message is
// what is wrong, without "invalid option" in front.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return ErrInvalid }

// Invalidf is an error about the command line that matches ErrInvalid,
// worded by format alone ("source %q: unknown scheme %q ...").
func Invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

func optionErr(name, format string, args ...any) error {
	return &OptionError{Option: name, Err: fmt.Errorf(format, args...)}
}

// ParseTTL parses a metadata TTL: "-1" (or "-1s") is Forever, "0" turns the
// cache off, a bare integer is seconds, anything else a Go duration
// ("60s", "1h30m"). Other negative values are errors.
func ParseTTL(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "-1", "-1s":
		return Forever, nil
	case "":
		return 0, fmt.Errorf("empty duration (use e.g. 60s, 0 for off, -1 for forever)")
	}
	var d time.Duration
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n > int64(math.MaxInt64/time.Second) || n < -int64(math.MaxInt64/time.Second) {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		d = time.Duration(n) * time.Second
	} else {
		d, err = time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration (use e.g. 60s, 0 for off, -1 for forever)", s)
		}
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative; only -1 (forever) is allowed", s)
	}
	return d, nil
}

// ParseSize parses a human size: "200GiB", "512MiB", "1.5TB", "4096".
// "" and "0" are zero.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("%q is negative", s)
	}
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size (use e.g. 200GiB)", s)
	}
	if n > math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(n), nil
}

// ParseSizeOrPercent parses a size, or a percentage such as "10%" (returned
// in pct, with bytes 0).
func ParseSizeOrPercent(s string) (bytes int64, pct float64, err error) {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsNaN(f) || f < 0 || f > 100 {
			return 0, 0, fmt.Errorf("%q is not a percentage between 0%% and 100%%", s)
		}
		return 0, f, nil
	}
	n, err := ParseSize(s)
	if err != nil {
		return 0, 0, fmt.Errorf("%q is not a size or percentage (use e.g. 5GiB or 10%%)", s)
	}
	return n, 0, nil
}

// ParseMode parses octal permission bits: "0444", "444", "0o444".
// Only the nine rwx bits are allowed: setuid/setgid/sticky make no sense
// on a read-only store.
func ParseMode(s string) (uint32, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimPrefix(strings.TrimPrefix(t, "0o"), "0O")
	if t == "" {
		return 0, fmt.Errorf("%q is not an octal mode (use e.g. 0444)", s)
	}
	n, err := strconv.ParseUint(t, 8, 32)
	if err != nil {
		return 0, fmt.Errorf("%q is not an octal mode (use e.g. 0444)", s)
	}
	if n > 0o777 {
		return 0, fmt.Errorf("%q has bits beyond 0777", s)
	}
	return uint32(n), nil
}

// parseInt parses a decimal integer within [min, max].
func parseInt(s string, min, max int64) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", s)
	}
	if n < min || n > max {
		return 0, fmt.Errorf("%d is out of range [%d, %d]", n, min, max)
	}
	return n, nil
}

// humanSize prints a size the way users type it ("512 MiB").
func humanSize(n int64) string {
	if n < 0 {
		return strconv.FormatInt(n, 10)
	}
	return humanize.IBytes(uint64(n))
}
