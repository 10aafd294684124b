package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"

	"ferry/flags"
)

// helperArgs is a mount(8) helper command line translated for ferry.
type helperArgs struct {
	args    []string // ferry flags, "--", SOURCE, MOUNTPOINT
	unknown []string // options ignored because of -s
	fake    bool     // -f
}

// parseHelperArgs translates mount(8)'s helper calling convention,
//
//	mount.ferry SOURCE DIR [-sfnv] [-N namespace] [-o options] [-t type]
//
// (options may come before, between or after the two paths, as with
// getopt) into ferry arguments. -o may be repeated; its options are
// translated by flags.ParseMountOptions. -n (no mtab) and -v are accepted
// and ignored; -s makes unknown -o options warnings; -f checks everything
// without mounting. Mount namespaces (-N) are not supported.
func parseHelperArgs(argv []string) (helperArgs, error) {
	var (
		h      helperArgs
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
				h.fake = true
			case 'n', 'v':
			case 'o', 't', 'N':
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(argv) {
						return h, fmt.Errorf("%w: -%c needs a value", flags.ErrInvalid, c)
					}
					i++
					val = argv[i]
				}
				switch c {
				case 'o':
					opts = append(opts, val)
				case 'N':
					return h, fmt.Errorf("%w: -N %s: mount namespaces are not supported", flags.ErrInvalid, val)
				}
				// -t is the type mount(8) already resolved to us.
				break cluster
			default:
				return h, fmt.Errorf("%w: unknown option -%c (usage: mount.ferry SOURCE DIR [-sfnv] [-o options])", flags.ErrInvalid, c)
			}
		}
	}
	if len(pos) != 2 {
		return h, fmt.Errorf("%w: need SOURCE and DIR, got %d argument(s) (usage: mount.ferry SOURCE DIR [-sfnv] [-o options])", flags.ErrInvalid, len(pos))
	}
	joined := strings.Join(opts, ",")
	var err error
	if sloppy {
		h.args, h.unknown, err = flags.ParseMountOptionsSloppy(joined)
	} else {
		h.args, err = flags.ParseMountOptions(joined)
	}
	if err != nil {
		return h, err
	}
	h.args = append(h.args, "--", pos[0], pos[1])
	return h, nil
}

func installHelperCommand() *cli.Command {
	return &cli.Command{
		Name:  "install-helper",
		Usage: "install the mount(8) helper so that `mount -t ferry` and /etc/fstab work",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dest", Value: "/sbin/mount.ferry", Usage: "where to create the helper symlink"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usageError{fmt.Errorf("install-helper takes no arguments (use --dest)")}
			}
			self, err := helperTarget(os.Args[0])
			if err != nil {
				return err
			}
			if err := installHelper(self, c.String("dest")); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "%s -> %s\n", c.String("dest"), self)
			return nil
		},
	}
}

// goBuildDir matches the temporary directories of go run and go test.
var goBuildDir = regexp.MustCompile(`/go-build[0-9]+/`)

// helperTarget is what the helper links to: this program as the user
// named it (argv0, found on $PATH if bare), not the file that name
// resolves to today, so that a link the admin repoints on upgrade
// (/usr/local/bin/ferry -> /opt/ferry/1.2/ferry) keeps the helper
// working. A binary of `go run` is deleted when it exits: refused.
func helperTarget(argv0 string) (string, error) {
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

// installHelper points the symlink dest at target, replacing an older
// symlink atomically (symlink to a temporary name, then rename).
func installHelper(target, dest string) error {
	if base := filepath.Base(dest); !isMountHelper(base) {
		return usageError{fmt.Errorf("--dest %s: the helper must be named mount.ferry for mount(8) to find it", dest)}
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
