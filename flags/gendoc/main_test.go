package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"ferry/flags"
)

func TestRunRewritesOnlyTheSection(t *testing.T) {
	p := filepath.Join(t.TempDir(), "README.md")
	before := "# title\n\nintro\n\n" + flags.BeginMarker + "\nold table\n" + flags.EndMarker + "\n\nafter\n"
	require.NoError(t, os.WriteFile(p, []byte(before), 0o644))

	require.Error(t, run(p, true), "a stale section fails -check")
	require.NoError(t, run(p, false))
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	s := string(got)
	require.True(t, strings.HasPrefix(s, "# title\n\nintro\n\n"+flags.BeginMarker))
	require.True(t, strings.HasSuffix(s, flags.EndMarker+"\n\nafter\n"))
	require.Contains(t, s, "--cache-dir")
	require.NotContains(t, s, "old table")
	require.NoError(t, run(p, true), "fresh after a rewrite")
}

func TestRunNeedsMarkers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "README.md")
	require.NoError(t, os.WriteFile(p, []byte("# no markers\n"), 0o644))
	require.Error(t, run(p, false))
}
