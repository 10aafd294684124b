package daemon

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"ferry/flags"
)

// IsMountHelper reports whether argv0 names mount(8)'s helper
// (/sbin/mount.ferry, or mount.ferry.<subtype>).
func IsMountHelper(argv0 string) bool {
	base := filepath.Base(argv0)
	return base == "mount.ferry" || strings.HasPrefix(base, "mount.ferry.")
}

// HelperArgs is a mount(8) helper command line translated for ferry.
type HelperArgs struct {
	Args    []string // ferry flags, "--", SOURCE, MOUNTPOINT
	Unknown []string // options ignored because of -s
	Fake    bool     // -f
}

// ParseHelperArgs translates mount(8)'s helper calling convention,
//
//	mount.ferry SOURCE DIR [-sfnv] [-N namespace] [-o options] [-t type]
//
// (options may come before, between or after the two paths, as with
// getopt) into ferry arguments. -o may be repeated; its options are
// translated by flags.ParseMountOptions. -n (no mtab) and -v are accepted
// and ignored; -s makes unknown -o options warnings; -f checks everything
// without mounting. Mount namespaces (-N) are not supported.
func ParseHelperArgs(argv []string) (HelperArgs, error) {
	var (
		h      HelperArgs
		opts   []string
		pos    []string
		sloppy bool
	)
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		if a == "--" {
			pos = append(pos, argv[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		// A cluster of short options: -sfnv, -oro, -o ro, -t ferry.
	cluster:
		for j := 1; j < len(a); j++ {
			switch c := a[j]; c {
			case 's':
				sloppy = true
			case 'f':
				h.Fake = true
			case 'n', 'v':
			case 'o', 't', 'N':
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(argv) {
						return h, flags.Invalidf("-%c needs a value", c)
					}
					i++
					val = argv[i]
				}
				switch c {
				case 'o':
					opts = append(opts, val)
				case 'N':
					return h, flags.Invalidf("-N %s: mount namespaces are not supported", val)
				}
				// -t is the type mount(8) already resolved to us.
				break cluster
			default:
				return h, flags.Invalidf("unknown option -%c (usage: mount.ferry SOURCE DIR [-sfnv] [-o options])", c)
			}
		}
	}
	if len(pos) != 2 {
		return h, flags.Invalidf("need SOURCE and DIR, got %d argument(s) (usage: mount.ferry SOURCE DIR [-sfnv] [-o options])", len(pos))
	}
	joined := strings.Join(opts, ",")
	var err error
	if sloppy {
		h.Args, h.Unknown, err = flags.ParseMountOptionsSloppy(joined)
	} else {
		h.Args, err = flags.ParseMountOptions(joined)
	}
	if err != nil {
		return h, err
	}
	h.Args = append(h.Args, "--", pos[0], pos[1])
	return h, nil
}

// goBuildDir matches the temporary directories of go run and go test.
var goBuildDir = regexp.MustCompile(`/go-build[0-9]+/`)

// HelperTarget is what the helper links to: this program as the user
// named it (argv0, found on $PATH if bare), not the file that name
// resolves to today, so that a link the admin repoints on upgrade
// (/usr/local/bin/ferry -> /opt/ferry/1.2/ferry) keeps the helper
// working. A binary of `go run` is deleted when it exits: refused.
func HelperTarget(argv0 string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if self, err = filepath.EvalSymlinks(self); err != nil {
		return "", err
	}
	target := self
	named := argv0
	if !strings.Contains(named, "/") {
		named, err = exec.LookPath(named)
	}
	if err == nil {
		if abs, err := filepath.Abs(named); err == nil {
			if a, err1 := os.Stat(abs); err1 == nil {
				if b, err2 := os.Stat(self); err2 == nil && os.SameFile(a, b) {
					target = abs // the same program, by the name the user gave
				}
			}
		}
	}
	if goBuildDir.MatchString(self) {
		return "", fmt.Errorf("%s is a temporary binary (go run): build ferry and run install-helper from the built binary", self)
	}
	return target, nil
}

// errHelperExists: the destination is something other than a symlink, so
// replacing it could destroy a file we did not create.
var errHelperExists = errors.New("exists and is not a symlink; remove it first")

// InstallHelper points the symlink dest at target, replacing an older
// symlink atomically (symlink to a temporary name, then rename).
func InstallHelper(target, dest string) error {
	if base := filepath.Base(dest); !IsMountHelper(base) {
		return UsageError{fmt.Errorf("--dest %s: the helper must be named mount.ferry for mount(8) to find it", dest)}
	}
	if fi, err := os.Lstat(dest); err == nil && fi.Mode()&os.ModeSymlink == 0 {
		return fmt.Errorf("%s %w", dest, errHelperExists)
	}
	tmp := dest + ".tmp-ferry"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dest); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
