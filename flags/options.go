// Package flags is ferry's one table of command-line options: each option's
// name, type, default, help and its fstab `-o` spelling live in Options, and
// everything else (the urfave/cli flags, the parsed Config, the fstab option
// parser, the README section) is derived from that table.
//
// It must never touch the network, the store or the mount: it only turns
// strings into a validated Config, and every error it returns names the
// option that was wrong.
package flags

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// Kind is the type of an option's value, which decides how it is parsed and
// how it is written in help and in fstab.
type Kind int

const (
	// Bool options are switches: --allow-other, or allow_other in fstab.
	Bool Kind = iota
	// String options take any text.
	String
	// Int options take a decimal integer.
	Int
	// Duration options take a Go duration ("60s", "5m"), a bare number of
	// seconds, or -1 for "forever".
	Duration
	// Size options take a human size ("200GiB", "512MiB", "0").
	Size
	// SizeOrPercent options take a size or a percentage ("10%").
	SizeOrPercent
	// Mode options take octal permission bits ("0444").
	Mode
	// List options may be given several times; each value may also be a
	// comma-separated list.
	List
)

// Placeholder is how a value of this kind is shown in help.
func (k Kind) Placeholder() string {
	switch k {
	case Bool:
		return ""
	case Int:
		return "N"
	case Duration:
		return "DURATION"
	case Size:
		return "SIZE"
	case SizeOrPercent:
		return "SIZE|PCT%"
	case Mode:
		return "OCTAL"
	case List:
		return "OPT"
	default:
		return "VALUE"
	}
}

// Option is one row of the table.
type Option struct {
	// Name is the long flag name without dashes: "cache-dir". Fixed:
	// scripts and fstab files rely on it.
	Name string
	// Fstab is the `-o` spelling: Name with "-" replaced by "_".
	Fstab string
	Kind  Kind
	// Default is the value as a user would type it; it is parsed by the
	// same code as user input, so a default can never bypass validation.
	Default string
	// DefaultDoc replaces Default in help and docs when the real default
	// depends on the machine (e.g. the uid running ferry).
	DefaultDoc string
	Usage      string
	Category   string
	// Placeholder names the value in help ("PATH"); "" uses the Kind's.
	Placeholder string

	// set parses one raw value into cfg. Errors need not name the option:
	// the caller wraps them in *OptionError.
	set func(cfg *Config, raw string) error
}

// Flag is the option as written on the command line: "--cache-dir".
func (o *Option) Flag() string { return "--" + o.Name }

// ValueName is how the option's value is shown in help and docs; "" for
// switches.
func (o *Option) ValueName() string {
	if o.Placeholder != "" {
		return o.Placeholder
	}
	return o.Kind.Placeholder()
}

// ShownDefault is the default as shown to humans.
func (o *Option) ShownDefault() string {
	if o.DefaultDoc != "" {
		return o.DefaultDoc
	}
	return o.Default
}

// Categories in the order help and docs list them.
const (
	catMount   = "Mount"
	catStore   = "Store"
	catMeta    = "Metadata"
	catPerms   = "Ownership and permissions"
	catCache   = "Local disk cache"
	catPerf    = "Memory and network"
	catLogging = "Logging and metrics"
)

// Lookup finds an option by flag name ("cache-dir") or fstab name
// ("cache_dir").
func Lookup(name string) (*Option, bool) {
	for i := range Options {
		if Options[i].Name == name || Options[i].Fstab == name {
			return &Options[i], true
		}
	}
	return nil, false
}

// urfaveStringer is urfave/cli's own, captured before main replaces it.
var urfaveStringer = cli.FlagStringer

// HelpLine formats one flag for urfave/cli's help (assign it to
// cli.FlagStringer): "--cache-size SIZE\tusage (default: 0)", with the
// placeholder and default from the table rather than urfave's "value".
func HelpLine(f cli.Flag) string {
	names := f.Names()
	o, ok := Lookup(names[0])
	if !ok {
		return urfaveStringer(f) // --help and subcommand flags
	}
	line := o.Flag()
	if p := o.ValueName(); p != "" {
		line += " " + p
	}
	line += "\t" + o.Usage
	if d := o.ShownDefault(); d != "" && (o.Kind != Bool || d == "true") { // a bool is false unless said
		line += " (default: " + d + ")"
	}
	return line
}

// CLIFlags returns fresh urfave/cli flags for every option. Fresh each call
// because cli flags remember whether they were set.
//
// Every non-bool option is a cli.StringFlag (lists a StringSliceFlag) so that
// parsing, and therefore every error message, is ours and names the option.
func CLIFlags() []cli.Flag {
	out := make([]cli.Flag, 0, len(Options))
	for i := range Options {
		o := &Options[i]
		usage := o.Usage
		switch o.Kind {
		case Bool:
			out = append(out, &cli.BoolFlag{
				Name: o.Name, Usage: usage, Category: o.Category,
				Value: o.Default == "true",
			})
		case List:
			out = append(out, &cli.StringSliceFlag{
				Name: o.Name, Usage: usage, Category: o.Category,
				DefaultText: o.ShownDefault(),
			})
		default:
			out = append(out, &cli.StringFlag{
				Name: o.Name, Usage: usage, Category: o.Category,
				Value: o.Default, DefaultText: o.ShownDefault(),
				TakesFile: strings.HasSuffix(o.Name, "-file") || strings.HasSuffix(o.Name, "-dir"),
			})
		}
	}
	return out
}
