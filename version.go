package main

import (
	"fmt"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"
)

// buildVersion is what the binary says of itself: the module version
// (a tag when built with `go install ferry@v1.2.3`, "(devel)" from a
// checkout), the VCS revision and whether the tree had changes, and the
// Go version. All from the build information the Go toolchain embeds.
type buildVersion struct {
	Version   string
	Revision  string // "" when built outside a VCS checkout (or -buildvcs=false)
	Modified  bool
	GoVersion string
}

// readBuildVersion reads the running binary's build information.
func readBuildVersion() buildVersion {
	v := buildVersion{Version: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Version, v.GoVersion = bi.Main.Version, bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// revision is the revision as shown and labelled: "+dirty" marks a tree
// with uncommitted changes, "unknown" a build without VCS information.
func (v buildVersion) revision() string {
	r := v.Revision
	if r == "" {
		return "unknown"
	}
	if v.Modified {
		r += "+dirty"
	}
	return r
}

// String is the line `ferry version` prints.
func (v buildVersion) String() string {
	return fmt.Sprintf("ferry %s (revision %s, %s)", v.Version, v.revision(), v.GoVersion)
}

// buildInfoGauge is ferry_build_info{version,revision,goversion} 1, the
// usual way to tell which build each scraped mount runs.
func (v buildVersion) buildInfoGauge() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ferry_build_info",
		Help: "Always 1; its labels say which build of ferry serves the mount.",
		ConstLabels: prometheus.Labels{
			"version": v.Version, "revision": v.revision(), "goversion": v.GoVersion,
		},
	})
	g.Set(1)
	return g
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print ferry's version, VCS revision and Go version",
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usageError{Err: fmt.Errorf("version takes no arguments")}
			}
			_, err := fmt.Fprintln(c.App.Writer, readBuildVersion())
			return err
		},
	}
}
