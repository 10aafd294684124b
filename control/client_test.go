package control

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Paths that are on no ferry mount: found as such, whether they exist or
// not, and each operation fails on them with one line per path and an
// OperationError counting them, without asking any daemon.
func TestNotOnFerry(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644))
	for _, p := range []string{dir, filepath.Join(dir, "f"), filepath.Join(dir, "new", "deeper")} {
		_, _, err := ferryMount(p)
		assert.ErrorIs(t, err, errNotFerry, p)
		_, _, _, err = locate(p)
		assert.ErrorIs(t, err, errNotFerry, p)
	}

	ctx := context.Background()
	var stdout, stderr bytes.Buffer
	err := Invalidate(ctx, InvalidateRequest{Paths: []string{dir, dir + "/f"}, Stdout: &stdout, Stderr: &stderr})
	var oe *OperationError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "invalidate: 2 of 2 paths failed", oe.Msg)
	assert.Equal(t, "ferry invalidate: "+dir+": not on a ferry mount\nferry invalidate: "+dir+"/f: not on a ferry mount\n", stderr.String())
	assert.Empty(t, stdout.String())

	stdout.Reset()
	stderr.Reset()
	err = Check(ctx, WarmRequest{Paths: []string{dir}, JSON: true, Stdout: &stdout, Stderr: &stderr})
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "warm --check: "+dir+": not on a ferry mount", oe.Msg, "one problem: the error says it")
	assert.Empty(t, stderr.String(), "and nothing else does")
	assert.JSONEq(t, `{"paths":[{"path":"`+dir+`","files":0,"bytes":0,"cached_bytes":0,"percent":100,"errors":1}],
		"total":{"path":"total","files":0,"bytes":0,"cached_bytes":0,"percent":100,"errors":1}}`, stdout.String())

	// Without --json, no line of figures for a PATH that could not be
	// checked at all; two problems are listed, and counted.
	stdout.Reset()
	err = Check(ctx, WarmRequest{Paths: []string{dir, dir + "/f"}, Stdout: &stdout, Stderr: &stderr})
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "warm --check: 2 problems (above)", oe.Msg)
	assert.Equal(t, "ferry warm --check: "+dir+": not on a ferry mount\nferry warm --check: "+dir+"/f: not on a ferry mount\n", stderr.String())
	assert.Empty(t, stdout.String())

	stdout.Reset()
	stderr.Reset()
	err = Warm(ctx, WarmRequest{Paths: []string{dir, filepath.Join(dir, "missing")}, Parallel: 2, Stdout: &stdout, Stderr: &stderr})
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "warm: 2 errors", oe.Msg)
	assert.Equal(t, 2, strings.Count(stderr.String(), "\n"), stderr.String())
	assert.Contains(t, stderr.String(), "ferry warm: "+dir+": not on a ferry mount\n")
	assert.Contains(t, stderr.String(), "ferry warm: "+filepath.Join(dir, "missing")+": stat ")
	assert.Regexp(t, `^warmed 0 files, 0 B in \S+s \(0 B/s\); 2 errors\n$`, stdout.String())
}
