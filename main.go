// Command ferry mounts a Google Cloud Storage or S3 bucket, or a local
// directory, as a read-only FUSE file system:
//
//	ferry [flags] gs://bucket[/prefix] /mnt/data
//	mount -t ferry gs://bucket /mnt/data -o cache_dir=/ssd/ferry   # via /sbin/mount.ferry
//
// main builds the command line (urfave/cli, with the options of package
// flags) and hands over to packages: daemon runs the mount's lifecycle,
// mountStack (build.go) builds what it mounts, store -> metadata -> disk
// cache -> readahead -> fs, in one function, and control runs the
// commands that operate a running mount (warm, invalidate). It must never leave a mount
// behind when it fails, and never hang the caller of `mount`: package
// daemon sees to both.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"ferry/bucket"
	"ferry/control"
	"ferry/daemon"
	"ferry/flags"
	"ferry/progress"
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
		args, inv.fake, inv.helper = h.Args, h.Fake, true
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
	if errors.As(err, new(daemon.ReportedError)) {
		return exitCode(err) // the background child's: its parent prints it
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
		oe *control.OperationError
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
	fake bool
	// helper: run as mount(8)'s helper, every option given with -o.
	helper         bool
	stdout, stderr io.Writer
}

func init() {
	cli.FlagStringer = flags.HelpLine
	// --version without urfave's -v alias (mount.ferry's -v means
	// verbose) and printed as `ferry version` prints it.
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version and exit"}
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, readBuildVersion()) }
}

func newApp(inv *invocation) *cli.App {
	return &cli.App{
		Name:  "ferry",
		Usage: "mount a GCS or S3 bucket, or a local directory, read-only",
		UsageText: "ferry [flags] SOURCE MOUNTPOINT\n" +
			"   SOURCE is gs://bucket[/prefix], s3://bucket[/prefix] or file:///dir\n" +
			"   mount -t ferry SOURCE MOUNTPOINT -o cache_dir=/ssd/ferry,allow_other   (after ferry install-helper)",
		// --help by hand: urfave/cli adds it only beside its own help
		// command, and ours (helpCommand) has ferry's errors.
		Flags:           append(flags.CLIFlags(), cli.HelpFlag),
		HideHelpCommand: true,
		Version:         readBuildVersion().Version,
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
				if inv.helper {
					err = flags.AsMountOption(err)
				}
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
	cmds := []*cli.Command{installHelperCommand(), docsCommand(inv), warmCommand(inv), invalidateCommand(inv),
		statsCommand(inv), versionCommand(), helpCommand()}
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

// helpCommand is `ferry help [COMMAND]`, the same as --help.
func helpCommand() *cli.Command {
	return &cli.Command{
		Name:      "help",
		Usage:     "show this help, or a command's (ferry help warm)",
		ArgsUsage: "[COMMAND]",
		Action: func(c *cli.Context) error {
			name := c.Args().First()
			switch {
			case c.NArg() > 1:
				return usageError{Err: errors.New("usage: ferry help [COMMAND]")}
			case name == "":
				return cli.ShowAppHelp(c)
			case c.App.Command(name) == nil || name == "help":
				var names []string
				for _, cmd := range c.App.Commands {
					names = append(names, cmd.Name)
				}
				return usageError{Err: fmt.Errorf("help: no command %q (ferry has %s)", name, strings.Join(names, ", "))}
			}
			// The app's context: the help command's own lists no commands.
			return cli.ShowCommandHelp(c.Lineage()[1], name)
		},
	}
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

func warmCommand(inv *invocation) *cli.Command {
	return &cli.Command{
		Name:      "warm",
		Usage:     "read files or whole trees of a ferry mount into its disk cache (or, with --check, report how much is cached)",
		ArgsUsage: "PATH...",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "parallel", Aliases: []string{"p"}, Value: 8, Usage: "files read at once"},
			&cli.StringFlag{Name: "list", Usage: "also warm the paths in this file, one per line (- for stdin)"},
			&cli.BoolFlag{Name: "check", Usage: "fetch nothing: report how much of each PATH is in the disk cache"},
			&cli.StringFlag{Name: "progress", Value: "auto", Usage: "progress bar on stderr: auto (if a terminal), always or never"},
			&cli.BoolFlag{Name: "json", Usage: "print the summary as JSON"},
		},
		Action: func(c *cli.Context) error {
			paths := append([]string(nil), c.Args().Slice()...)
			if l := c.String("list"); l != "" {
				more, err := readPathList(l, os.Stdin)
				if err != nil {
					return usageError{Err: fmt.Errorf("--list: %w", err)}
				}
				paths = append(paths, more...)
			}
			if len(paths) == 0 {
				return usageError{Err: errors.New("warm: no PATH given (ferry warm [--check] PATH... or --list FILE)")}
			}
			if c.Int("parallel") < 1 {
				return usageError{Err: errors.New("--parallel must be at least 1")}
			}
			var bar bool
			switch c.String("progress") {
			case "auto":
				bar = progress.IsTerminal(inv.stderr)
			case "always":
				bar = true
			case "never":
			default:
				return usageError{Err: fmt.Errorf("--progress %q: use auto, always or never", c.String("progress"))}
			}
			req := control.WarmRequest{
				Paths:    paths,
				Parallel: c.Int("parallel"),
				Progress: bar,
				JSON:     c.Bool("json"),
				Stdout:   inv.stdout,
				Stderr:   inv.stderr,
			}
			if c.Bool("check") {
				return control.Check(c.Context, req)
			}
			return control.Warm(c.Context, req)
		},
	}
}

func invalidateCommand(inv *invocation) *cli.Command {
	return &cli.Command{
		Name:      "invalidate",
		Usage:     "drop a ferry mount's cached metadata of PATH (a file, a directory and all below it, or the mount point for everything)",
		ArgsUsage: "PATH...",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "data", Usage: "also drop the disk cache of the files at or under PATH"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return usageError{Err: errors.New("invalidate: no PATH given (ferry invalidate [--data] PATH...)")}
			}
			return control.Invalidate(c.Context, control.InvalidateRequest{
				Paths:  c.Args().Slice(),
				Data:   c.Bool("data"),
				Stdout: inv.stdout,
				Stderr: inv.stderr,
			})
		},
	}
}

func statsCommand(inv *invocation) *cli.Command {
	return &cli.Command{
		Name:      "stats",
		Usage:     "show a ferry mount's live counters every second: reads, the store, the disk cache, the memory budget, open files, errors",
		ArgsUsage: "MOUNT",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print one sample (over --interval) as JSON and exit"},
			&cli.DurationFlag{Name: "interval", Value: time.Second, Usage: "time between samples"},
			&cli.IntFlag{Name: "count", Usage: "exit after this many samples (0: until interrupted)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{Err: errors.New("stats: give one MOUNT (ferry stats [--json] /mnt/data)")}
			}
			if c.Duration("interval") <= 0 || c.Int("count") < 0 {
				return usageError{Err: errors.New("stats: --interval must be positive and --count at least 0")}
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return control.Stats(ctx, control.StatsRequest{
				Path: c.Args().First(), Interval: c.Duration("interval"), JSON: c.Bool("json"),
				Count: c.Int("count"), Clear: progress.IsTerminal(inv.stdout), Stdout: inv.stdout,
			})
		},
	}
}

// readPathList reads one path per line from name ("-": stdin), skipping
// blank lines.
func readPathList(name string, stdin io.Reader) ([]string, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	var paths []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := strings.TrimRight(sc.Text(), "\r"); strings.TrimSpace(line) != "" {
			paths = append(paths, line)
		}
	}
	return paths, sc.Err()
}

// subcommands are the names permuteArgs leaves to their own parsing.
var subcommands = []string{"install-helper", "docs", "warm", "invalidate", "version", "stats", "help"}

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
		case len(pos) == 0 && slices.Contains(subcommands, a):
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
