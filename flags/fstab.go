package flags

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ignoredMountOptions are meant for mount(8), systemd or the kernel's
// defaults and mean nothing to ferry.
//   - rw: mount(8) adds it when no ro/rw is given; ferry is always
//     read-only, so it is dropped rather than failing every plain mount.
//   - relatime: the kernel's default; the FUSE driver rejects it as data.
//   - sync/async/dirsync: about writes; a read-only mount has none.
//   - the other atime modes: a read-only mount never updates atimes.
//   - nosymfollow: a ferry mount has no symlinks to follow.
//   - iversion, mand, silent/loud: about writes, locks or kernel logging;
//     nothing a ferry mount does.
var ignoredMountOptions = []string{
	"auto", "noauto", "user", "nouser", "users", "owner", "group", "_netdev", "nofail",
	"defaults", "rw", "relatime", "sync", "async", "dirsync",
	"norelatime", "diratime", "nodiratime", "strictatime", "nostrictatime", "lazytime", "nolazytime",
	"symfollow", "nosymfollow", "iversion", "noiversion", "mand", "nomand", "silent", "loud",
}

// ignoredMountPrefixes: x-* options are for userspace tools by convention
// (x-systemd.automount, x-gvfs-show); comment= is fstab's free text;
// user= is added by mount(8) for user mounts.
var ignoredMountPrefixes = []string{"x-", "comment=", "user="}

// UnknownMountOptionError is returned for an option ferry does not know.
type UnknownMountOptionError struct {
	Option string
}

func (e *UnknownMountOptionError) Error() string {
	return fmt.Sprintf("-o %s: unknown mount option (options are the flag names with _ for -, e.g. cache_dir=/ssd/ferry)", e.Option)
}

func (e *UnknownMountOptionError) Unwrap() error { return ErrInvalid }

// ParseMountOptions turns an fstab / `mount -o` option string into ferry
// command-line arguments:
//
//	ro,_netdev,allow_other,cache_dir=/ssd/ferry,metadata_ttl=-1,nodev
//	-> --ro --allow-other --cache-dir=/ssd/ferry --metadata-ttl=-1 --kernel-option=nodev
//
// key=value options become --key=value, bare booleans --key (or
// key=true/false), the generic kernel flags (nodev, noexec, ...) become
// --kernel-option, and mount(8)/systemd-only options are dropped. An
// unknown option is an error naming it.
//
// Options are separated by commas. As in libmount, a value that contains a
// comma must be double-quoted: cache_dir="/ssd/a,b". There is no escape for
// a double quote inside a value. Values are checked later, by the same code
// that checks command-line flags; AsMountOption makes its errors name the
// option as -o spells it.
func ParseMountOptions(s string) ([]string, error) {
	args, _, err := parseMountOptions(s, false)
	return args, err
}

// ParseMountOptionsSloppy is ParseMountOptions for mount(8)'s -s: unknown
// options are returned in unknown instead of failing.
func ParseMountOptionsSloppy(s string) (args, unknown []string, err error) {
	return parseMountOptions(s, true)
}

func parseMountOptions(s string, sloppy bool) (args, unknown []string, err error) {
	items, err := splitMountOptions(s)
	if err != nil {
		return nil, nil, err
	}
	for _, item := range items {
		if item == "" {
			continue // "ro,,x" and trailing commas are harmless
		}
		key, value, hasValue := strings.Cut(item, "=")
		if slices.Contains(ignoredMountOptions, item) || hasIgnoredPrefix(item) {
			continue
		}
		if !hasValue && slices.Contains(KernelMountOptions, key) {
			args = append(args, "--kernel-option="+key)
			continue
		}
		o, ok := lookupFstab(key)
		if !ok {
			if sloppy {
				unknown = append(unknown, item)
				continue
			}
			return nil, nil, &UnknownMountOptionError{Option: item}
		}
		value, err = unquote(o, value)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case o.Kind == Bool && !hasValue:
			args = append(args, o.Flag())
		case o.Kind == Bool:
			b, err := strconv.ParseBool(value)
			if err != nil {
				return nil, nil, &OptionError{Option: o.Name, Value: value, Mount: true, Err: fmt.Errorf("%q is not true or false", value)}
			}
			args = append(args, o.Flag()+"="+strconv.FormatBool(b))
		case !hasValue:
			return nil, nil, &OptionError{Option: o.Name, Mount: true, Err: fmt.Errorf("needs a value (%s=%s)", key, o.ValueName())}
		default:
			args = append(args, o.Flag()+"="+value)
		}
	}
	return args, unknown, nil
}

// lookupFstab finds an option by its fstab spelling only: "cache-dir" is
// not an fstab option, so typos in the dash form are caught, not guessed.
func lookupFstab(key string) (*Option, bool) {
	for i := range Options {
		if Options[i].Fstab == key {
			return &Options[i], true
		}
	}
	return nil, false
}

func hasIgnoredPrefix(item string) bool {
	for _, p := range ignoredMountPrefixes {
		if strings.HasPrefix(item, p) {
			return true
		}
	}
	return false
}

// splitMountOptions splits on commas outside double quotes, like libmount.
func splitMountOptions(s string) ([]string, error) {
	var items []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				items = append(items, s[start:i])
				start = i + 1
			}
		}
	}
	if quoted {
		return nil, Invalidf("-o %s: unbalanced double quote", s)
	}
	return append(items, s[start:]), nil
}

// unquote strips the double quotes around a whole value; quotes anywhere
// else are an error, since no option value needs them.
func unquote(o *Option, v string) (string, error) {
	if !strings.Contains(v, `"`) {
		return v, nil
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && !strings.Contains(v[1:len(v)-1], `"`) {
		return v[1 : len(v)-1], nil
	}
	return "", &OptionError{Option: o.Name, Value: v, Mount: true, Err: fmt.Errorf("quote the whole value (%s=\"...\")", o.Fstab)}
}
