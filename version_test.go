package main

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVersionCommand: `ferry version` and `ferry --version` print the
// same line, from the binary's own build information.
func TestVersionCommand(t *testing.T) {
	code, out, _ := runCmd("ferry", "version")
	require.Equal(t, exitOK, code)
	assert.Equal(t, readBuildVersion().String()+"\n", out)
	assert.Contains(t, out, runtime.Version())

	code, flagOut, _ := runCmd("ferry", "--version")
	require.Equal(t, exitOK, code)
	assert.Equal(t, out, flagOut)

	code, _, errOut := runCmd("ferry", "version", "extra")
	assert.Equal(t, exitUsage, code)
	assert.Equal(t, "ferry: version takes no arguments\n", errOut)
}

func TestBuildVersionRevision(t *testing.T) {
	v := buildVersion{Version: "v1.2.3", Revision: "abc123", GoVersion: "go1.26.0"}
	assert.Equal(t, "ferry v1.2.3 (revision abc123, go1.26.0)", v.String())
	v.Modified = true
	assert.Equal(t, "abc123+dirty", v.revision())
	assert.Equal(t, "unknown", buildVersion{}.revision(), "built without VCS information")
}

// TestBuildInfoGauge: one series, value 1, labelled with the build.
func TestBuildInfoGauge(t *testing.T) {
	v := buildVersion{Version: "v1.2.3", Revision: "abc123", Modified: true, GoVersion: "go1.26.0"}
	reg := prometheus.NewRegistry()
	reg.MustRegister(v.buildInfoGauge())
	want := `# HELP ferry_build_info Always 1; its labels say which build of ferry serves the mount.
# TYPE ferry_build_info gauge
ferry_build_info{goversion="go1.26.0",revision="abc123+dirty",version="v1.2.3"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "ferry_build_info"))
}
