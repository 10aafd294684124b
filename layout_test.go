package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// imports returns the ferry packages that the non-test files of the
// package in dir import ("bucket", "readahead", ...), sorted.
func imports(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, im := range af.Imports {
			p, err := strconv.Unquote(im.Path.Value)
			require.NoError(t, err)
			if rest, ok := strings.CutPrefix(p, "ferry/"); ok && !slices.Contains(out, rest) {
				out = append(out, rest)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestImportsShowTheReadPath: the imports say how a read flows, kernel ->
// fs -> readahead -> filecache and bucket, with metadata beside fs; a
// lower layer never imports a higher one, filecache and the lifecycle
// know nothing of the read path, and the range type is a leaf.
func TestImportsShowTheReadPath(t *testing.T) {
	for _, tc := range []struct {
		dir       string
		want      []string // imported, at least
		forbidden []string
	}{
		{".", []string{"bucket/connect", "control", "daemon", "filecache", "flags", "fs", "metadata", "readahead"}, nil},
		{"fs", []string{"bucket", "metadata", "readahead"}, []string{"filecache", "bucket/connect", "control", "daemon", "flags"}},
		{"readahead", []string{"bucket", "filecache", "metadata", "ranges"}, []string{"fs", "control", "daemon", "flags"}},
		{"metadata", []string{"bucket"}, []string{"fs", "readahead", "filecache", "control", "daemon", "flags"}},
		{"filecache", []string{"ranges"}, []string{"bucket", "fs", "readahead", "metadata", "control", "daemon", "flags"}},
		{"ranges", nil, []string{"bucket", "fs", "readahead", "metadata", "filecache", "control", "daemon", "flags", "mountinfo"}},
		{"daemon", []string{"mountinfo"}, []string{"fs", "readahead", "filecache", "metadata", "bucket"}},
		{"bucket", []string{"ranges"}, []string{"fs", "readahead", "filecache", "metadata"}},
	} {
		got := imports(t, tc.dir)
		for _, w := range tc.want {
			assert.Contains(t, got, w, "%s must import ferry/%s", tc.dir, w)
		}
		for _, f := range tc.forbidden {
			assert.NotContains(t, got, f, "%s must not import ferry/%s", tc.dir, f)
		}
	}
}

// TestSizeLimits: the packages of the read path, and those that hold the
// mount's lifecycle, keep files under 800 lines and functions (tests
// included) under 100, so that each can be read whole.
func TestSizeLimits(t *testing.T) {
	const maxFile, maxFunc = 800, 100
	for _, dir := range []string{".", "fs", "readahead", "filecache", "metadata", "ranges", "control", "daemon", "mountinfo"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files, dir)
		for _, f := range files {
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			assert.LessOrEqual(t, strings.Count(string(src), "\n"), maxFile, "%s is too long", f)
			fset := token.NewFileSet()
			af, err := parser.ParseFile(fset, f, src, 0)
			require.NoError(t, err)
			for _, d := range af.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok {
					continue
				}
				n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				assert.LessOrEqual(t, n, maxFunc, "%s: %s is too long", f, fd.Name.Name)
			}
		}
	}
}
