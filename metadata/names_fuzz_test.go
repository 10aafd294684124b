package metadata

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzObjectNameToEntry checks the mapping from an object name to the
// directory entries that show it (what fetchPage and lookups do, level
// by level): every entry shown is one valid component, the path of
// entries maps back to exactly that object, and a path made of shown
// entries never leaves the mount nor aliases another path once the
// kernel cleans it.
func FuzzObjectNameToEntry(f *testing.F) {
	for _, seed := range []string{
		"a", "a/b/c.txt", "dir/", "a//b", "../../etc/passwd", "/abs", "a/./b", "a/../b", "..", ".",
		"with space/ünïcødé %+#?&=.txt", "nul\x00byte", strings.Repeat("L", 256), strings.Repeat("L", 255),
		`back\slash\..\x`, "trailing/", "\xff\xfe", "a/b/",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		dir := "" // the root
		rest := name
		for rest != "" {
			prefix := DirPrefix(dir)
			require.True(t, strings.HasPrefix(name, prefix))
			// As a listing shows it: a common prefix (a subdirectory)
			// or the object itself.
			comp, after, isDir := strings.Cut(strings.TrimPrefix(name, prefix), "/")
			if !ValidName(comp) {
				return // hidden at this level, and everything below it
			}
			require.NotContains(t, comp, "/")
			require.NotContains(t, comp, "\x00")
			require.NotEqual(t, ".", comp)
			require.NotEqual(t, "..", comp)
			require.LessOrEqual(t, len(comp), MaxNameLen)

			child := ChildPath(dir, comp)
			d, n := SplitPath(child)
			require.Equal(t, dir, d, "SplitPath(childPath) round trip")
			require.Equal(t, comp, n)
			// The kernel path of the entry stays inside the mount and is
			// already clean (no other path can alias it).
			p := filepath.Join("/mnt", child)
			require.Equal(t, "/mnt/"+child, p, "the path of %q is not clean", name)
			if !isDir {
				require.Equal(t, name, child, "a file entry maps back to its object")
				return
			}
			dir, rest = child, after
		}
	})
}
