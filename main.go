// Command ferry mounts a Google Cloud Storage or S3 bucket, or a local
// directory, as a read-only FUSE file system:
//
//	ferry [flags] gs://bucket[/prefix] /mnt/data
//	mount -t ferry gs://bucket /mnt/data -o cache_dir=/ssd/ferry   # via /sbin/mount.ferry
//
// main builds the command line (urfave/cli, with the options of package
// flags) and hands over: the mount's lifecycle to package daemon, the
// file system it mounts to mountStack (build.go), which wires
// bucket -> filecache -> readahead -> fs in one function, and the
// commands that operate a running mount to the control socket. It must
// never leave a mount behind when it fails, and never hang the caller of
// `mount`: package daemon sees to both.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"

	"ferry/bucket"
	"ferry/daemon"
	"ferry/flags"
)

// Exit statuses are mount(8)'s helper convention (package daemon).
const (
	exitOK         = daemon.ExitOK
	exitUsage      = daemon.ExitUsage
	exitMountError = daemon.ExitMountError
)

// usageError marks errors caused by the command line.
type usageError = daemon.UsageError

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run is main without the process: argv[0] picks the calling convention.
func run(argv []string, stdout, stderr io.Writer) int {
	prog := "ferry"
	inv := invocation{stdout: stdout, stderr: stderr}
	args := argv[1:]
	if daemon.IsMountHelper(argv[0]) {
		prog = "mount.ferry"
		h, err := daemon.ParseHelperArgs(args)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", prog, err)
			return exitUsage
		}
		for _, u := range h.Unknown {
			fmt.Fprintf(stderr, "%s: ignoring unknown option %q (-s)\n", prog, u)
		}
		args, inv.fake = h.Args, h.Fake
	} else {
		var err error
		if args, err = permuteArgs(args); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", prog, err)
			return exitUsage
		}
	}
	inv.args = args

	err := newApp(&inv).Run(append([]string{"ferry"}, args...))
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "%s: %s\n", prog, oneLine(err.Error()))
	return exitCode(err)
}

// oneLine joins a message's lines (and runs of spaces) into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// exitCode classifies an error: the command line's fault, or the mount's.
func exitCode(err error) int {
	var (
		ue usageError
		ce *daemon.ChildError
		oe *operationError
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ce):
		return ce.Code
	case errors.As(err, &oe):
		return 1 // some files failed (warm, invalidate)
	case errors.As(err, &ue), errors.Is(err, flags.ErrInvalid), errors.Is(err, bucket.ErrInvalid):
		return exitUsage
	}
	return exitMountError
}

// invocation is what one run of the command needs besides its flags.
type invocation struct {
	// args are the ferry-style arguments (after mount.ferry translation);
	// the background child is started with exactly these.
	args []string
	// fake is mount(8)'s -f: check everything, mount nothing.
	fake           bool
	stdout, stderr io.Writer
}

func init() {
	cli.FlagStringer = flags.HelpLine
}

func newApp(inv *invocation) *cli.App {
	return &cli.App{
		Name:  "ferry",
		Usage: "mount a GCS or S3 bucket, or a local directory, read-only",
		UsageText: "ferry [flags] SOURCE MOUNTPOINT\n" +
			"   SOURCE is gs://bucket[/prefix], s3://bucket[/prefix] or file:///dir\n" +
			"   mount -t ferry SOURCE MOUNTPOINT -o cache_dir=/ssd/ferry,allow_other   (after ferry install-helper)",
		Flags:           flags.CLIFlags(),
		HideHelpCommand: true,
		Writer:          inv.stdout,
		ErrWriter:       inv.stderr,
		// Errors are printed once, by run, as one line.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   onUsageError,
		Commands:       commands(inv),
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 && c.NumFlags() == 0 {
				return cli.ShowAppHelp(c)
			}
			cfg, err := flags.FromContext(c)
			if err != nil {
				return usageError{Err: err}
			}
			return daemon.Run(c.Context, daemon.Command{
				Config:   cfg,
				Args:     inv.args,
				Fake:     inv.fake,
				Stderr:   inv.stderr,
				Mount:    mountStack,
				ExitCode: exitCode,
			})
		},
	}
}

// commands are ferry's subcommands. Each reports a bad command line the
// way the mount does: one line on stderr and exit 1, without urfave/cli's
// "Incorrect Usage" and help text on stdout.
func commands(inv *invocation) []*cli.Command {
	cmds := []*cli.Command{installHelperCommand(), docsCommand(inv), warmCommand(inv), invalidateCommand(inv)}
	for _, c := range cmds {
		c.OnUsageError = onUsageError
	}
	return cmds
}

// goFlagName is a flag as Go's flag package names it in its errors
// ("-name"); ferry's docs and help spell long flags "--name".
var goFlagName = regexp.MustCompile(`(^|[\s:])-([[:alnum:]][-[:alnum:]_]+)`)

// onUsageError is urfave/cli's OnUsageError for the app and its commands.
func onUsageError(c *cli.Context, err error, _ bool) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		help := "ferry --help"
		if c != nil && c.Command != nil && c.Command.Name != "" && c.Command.Name != c.App.Name {
			help = "ferry " + c.Command.Name + " --help"
		}
		msg = fmt.Sprintf("unknown flag -%s (%s lists them)", name, help)
	}
	return usageError{Err: errors.New(goFlagName.ReplaceAllString(msg, "$1--$2"))}
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
				return usageError{Err: fmt.Errorf("install-helper takes no arguments (use --dest)")}
			}
			self, err := daemon.HelperTarget(os.Args[0])
			if err != nil {
				return err
			}
			if err := daemon.InstallHelper(self, c.String("dest")); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "%s -> %s\n", c.String("dest"), self)
			return nil
		},
	}
}

func docsCommand(inv *invocation) *cli.Command {
	return &cli.Command{
		Name:      "docs",
		Usage:     "print documentation",
		ArgsUsage: "flags",
		Action: func(c *cli.Context) error {
			if c.Args().First() != "flags" || c.NArg() != 1 {
				return usageError{Err: fmt.Errorf("usage: ferry docs flags")}
			}
			_, err := io.WriteString(inv.stdout, flags.Markdown())
			return err
		},
	}
}

// permuteArgs moves flags given after the positional arguments in front of
// them (`ferry gs://b /mnt --foreground`), which urfave/cli does not do by
// itself. The option table tells which flags take a value. Arguments after
// "--" and subcommand invocations are left alone. A flag that takes a
// value but has none (last, or before "--") is an error: urfave/cli would
// take the "--" we add as its value (--log-file writing to a file "--").
func permuteArgs(args []string) ([]string, error) {
	var opts, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			pos = append(pos, args[i+1:]...)
			i = len(args)
		case len(pos) == 0 && (a == "install-helper" || a == "docs" || a == "warm" || a == "invalidate"):
			return args, nil // a subcommand parses its own flags
		case strings.HasPrefix(a, "-") && a != "-":
			opts = append(opts, a)
			name := strings.TrimLeft(a, "-")
			if strings.Contains(name, "=") {
				continue
			}
			if o, ok := flags.Lookup(name); ok && o.Kind != flags.Bool {
				if i+1 == len(args) || args[i+1] == "--" {
					return nil, usageError{Err: fmt.Errorf("%s needs a value", a)}
				}
				opts = append(opts, args[i+1])
				i++
			}
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) == 0 {
		return opts, nil
	}
	return append(append(opts, "--"), pos...), nil
}
