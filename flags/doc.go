package flags

import (
	"fmt"
	"strings"
)

// README markers around the generated flag section.
const (
	BeginMarker = "<!-- BEGIN FLAGS -->"
	EndMarker   = "<!-- END FLAGS -->"
)

var categoryOrder = []string{catMount, catStore, catMeta, catPerms, catCache, catPerf, catLogging}

// Markdown documents every option, grouped by category, as Markdown tables.
// The README section between the markers is exactly this text.
func Markdown() string {
	var b strings.Builder
	b.WriteString("<!-- Generated from flags/table.go by `go run ./flags/gendoc`; do not edit. -->\n\n")
	b.WriteString("Every flag can also be given as a mount option (`mount -o`, `/etc/fstab`) with `_` for `-`: ")
	b.WriteString("`--cache-dir=/ssd/ferry` is `cache_dir=/ssd/ferry`, `--allow-other` is `allow_other`. ")
	b.WriteString("Options are separated by commas; a value that contains a comma must be double-quoted (`cache_dir=\"/ssd/a,b\"`). ")
	b.WriteString("Generic kernel mount flags (`nodev`, `nosuid`, `noexec`, `noatime`) are written bare and become `--kernel-option`; their opposites (`dev`, `suid`, `exec`, `atime`) are mount(8)'s defaults, which it never passes to a helper: write them `kernel_option=suid`. ")
	b.WriteString("`rw`, `defaults`, `auto`, `noauto`, `user`, `users`, `nouser`, `_netdev`, `nofail`, `x-*` and `comment=*` are ignored, and so are options that mean nothing on a read-only mount without symlinks: the other atime modes (`relatime`, `nodiratime`, `strictatime`, `lazytime`, ...), `sync`, `async`, `dirsync`, `nosymfollow`, `iversion`, `mand`, `silent`. An fstab line with `user` or `users` works: mount(8) adds `noexec,nosuid,nodev`, which ferry passes on. ")
	b.WriteString("Sizes are human (`200GiB`, `512MiB`); durations are Go durations (`60s`, `1.5s`, `5m`) or whole seconds (`60`), with `-1` meaning forever and `0` off.\n\n")
	b.WriteString("Every flag can also be set by an environment variable, `FERRY_` and its name in upper case with `_` for `-` (`FERRY_CACHE_DIR=/ssd/ferry`, `FERRY_ALLOW_OTHER=true`; a list is comma-separated), or in the YAML file `--config-file` names, keyed by flag name (`cache-dir: /ssd/ferry`; a list as a YAML list). ")
	b.WriteString("The first found wins: the command line (for `mount -t ferry` and fstab, the `-o` options), then the environment, then the file, then the default. ")
	b.WriteString("Values are checked as on the command line, and an error names the variable or the file; a `FERRY_` variable or a key in the file that names no flag is an error, not ignored.\n")
	for _, cat := range categoryOrder {
		fmt.Fprintf(&b, "\n### %s\n\n", cat)
		b.WriteString("| Flag | fstab `-o` | Environment | Default | Description |\n")
		b.WriteString("|---|---|---|---|---|\n")
		for i := range Options {
			o := &Options[i]
			if o.Category != cat {
				continue
			}
			flag := "`" + o.Flag() + "`"
			fstab := "`" + o.Fstab + "`"
			if p := o.ValueName(); p != "" {
				flag = "`" + o.Flag() + " " + p + "`"
				fstab = "`" + o.Fstab + "=" + p + "`"
			}
			def := o.ShownDefault()
			if def == "" {
				def = "—"
			} else if o.DefaultDoc == "" {
				def = "`" + def + "`"
			}
			fmt.Fprintf(&b, "| %s | %s | `%s` | %s | %s |\n", flag, fstab, o.Env(), def, strings.ReplaceAll(o.Usage, "|", `\|`))
		}
	}
	return b.String()
}

// UpdateSection returns readme with the text between BeginMarker and
// EndMarker replaced by section.
func UpdateSection(readme, section string) (string, error) {
	begin := strings.Index(readme, BeginMarker)
	end := strings.Index(readme, EndMarker)
	if begin < 0 || end < 0 || end < begin {
		return "", fmt.Errorf("README has no %s ... %s section", BeginMarker, EndMarker)
	}
	return readme[:begin+len(BeginMarker)] + "\n" + section + readme[end:], nil
}
