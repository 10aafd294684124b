package file

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

// linkTree is a source directory with symbolic links of every kind:
//
//	data/real.bin, data/sub/inner.txt      files
//	alias -> data/real.bin                 a file, relative
//	abs -> ROOT/data/real.bin              a file, absolute inside the root
//	chain -> alias                         a link to a link
//	dirlink -> data/sub                    a directory
//	data/up -> ..                          the root, from below it: a loop
//	a/l1 -> ../b, b/l2 -> ../a             two links that make a loop
//	outside -> ../secret, absout -> SECRET out of the root
//	dangling -> nothing, self -> self      nothing; a loop of links
func linkTree(t *testing.T) (root, secret string) {
	t.Helper()
	parent := t.TempDir()
	root = filepath.Join(parent, "root")
	secret = filepath.Join(parent, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("secret"), 0o644))
	for _, d := range []string{"data/sub", "a", "b"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "data/real.bin"), []byte("real bytes"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "data/sub/inner.txt"), []byte("inner"), 0o644))
	for link, target := range map[string]string{
		"alias": "data/real.bin", "abs": filepath.Join(root, "data/real.bin"), "chain": "alias",
		"dirlink": "data/sub", "data/up": "..", "a/l1": "../b", "b/l2": "../a",
		"outside": "../secret", "absout": secret, "dangling": "nothing", "self": "self",
	} {
		require.NoError(t, os.Symlink(target, filepath.Join(root, link)))
	}
	return root, secret
}

func listNames(t *testing.T, b *Bucket, prefix, delim string) (objects, prefixes []string) {
	t.Helper()
	l, err := b.List(t.Context(), &bucket.ListRequest{Prefix: prefix, Delimiter: delim})
	require.NoError(t, err, "List(%q, %q)", prefix, delim)
	require.Empty(t, l.ContinuationToken)
	for _, o := range l.Objects {
		objects = append(objects, o.Name)
	}
	return objects, l.Prefixes
}

// TestSymlinksFollowedInsideRoot: links to files and directories inside
// the root are shown under their own names with what they point to; links
// out of the root, to nothing or round a loop are hidden, counted, and
// logged once; no listing is endless.
func TestSymlinksFollowedInsideRoot(t *testing.T) {
	root, secret := linkTree(t)
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	b, err := New(Config{Dir: root, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	ctx := t.Context()

	real, err := b.Stat(ctx, &bucket.StatRequest{Name: "data/real.bin"})
	require.NoError(t, err)
	for _, name := range []string{"alias", "abs", "chain"} {
		o, err := b.Stat(ctx, &bucket.StatRequest{Name: name})
		require.NoError(t, err, name)
		assert.Equal(t, name, o.Name)
		assert.Equal(t, real.Size, o.Size, name)
		assert.Equal(t, real.Version, o.Version, "%s: the version is the file's", name)
		got, err := readAll(t, b, &bucket.ReadRequest{Name: name, Range: bucket.ByteRange{Limit: 100}, Version: o.Version})
		require.NoError(t, err, name)
		assert.Equal(t, "real bytes", string(got), name)
	}
	got, err := readAll(t, b, &bucket.ReadRequest{Name: "dirlink/inner.txt", Range: bucket.ByteRange{Limit: 100}})
	require.NoError(t, err)
	assert.Equal(t, "inner", string(got))

	objects, prefixes := listNames(t, b, "", "/")
	assert.Equal(t, []string{"abs", "alias", "chain"}, objects)
	assert.Equal(t, []string{"a/", "b/", "data/", "dirlink/"}, prefixes)
	objects, prefixes = listNames(t, b, "dirlink/", "/")
	assert.Equal(t, []string{"dirlink/inner.txt"}, objects)
	assert.Empty(t, prefixes)
	objects, prefixes = listNames(t, b, "data/", "/")
	assert.Equal(t, []string{"data/real.bin"}, objects)
	assert.Equal(t, []string{"data/sub/"}, prefixes, "data/up leads back to the root: hidden")
	// a/l1 is b, whose l2 leads back to a: hidden there, so a/l1 holds
	// nothing (its marker).
	objects, prefixes = listNames(t, b, "a/l1/", "/")
	assert.Equal(t, []string{"a/l1/"}, objects)
	assert.Empty(t, prefixes)
	// The whole tree is finite.
	objects, _ = listNames(t, b, "", "")
	assert.Equal(t, []string{"a/l1/", "abs", "alias", "b/l2/", "chain", "data/real.bin", "data/sub/inner.txt", "dirlink/inner.txt"}, objects)

	for _, name := range []string{"outside", "absout", "dangling", "self", "data/up/alias", "a/l1/l2/l1/x", "dirlink"} {
		_, err := b.Stat(ctx, &bucket.StatRequest{Name: name})
		assert.ErrorIs(t, err, bucket.ErrNotFound, name)
		got, err := readAll(t, b, &bucket.ReadRequest{Name: name, Range: bucket.ByteRange{Limit: 100}})
		assert.ErrorIs(t, err, bucket.ErrNotFound, name)
		assert.Empty(t, got, name)
	}
	for _, prefix := range []string{"outside/", "data/up/", "a/l1/l2/"} {
		objects, prefixes := listNames(t, b, prefix, "/")
		assert.Empty(t, objects, prefix)
		assert.Empty(t, prefixes, prefix)
	}

	hidden := b.HiddenLinks()
	assert.Positive(t, hidden)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, mfs, 1)
	assert.Equal(t, "ferry_file_hidden_links_total", mfs[0].GetName())
	assert.Equal(t, float64(hidden), mfs[0].GetMetric()[0].GetCounter().GetValue())
	assert.Equal(t, 1, strings.Count(logs.String(), "level=WARN"), "logged once: %s", logs.String())
	assert.Contains(t, logs.String(), "hiding symbolic links of the source")
	data, err := os.ReadFile(secret)
	require.NoError(t, err)
	assert.Equal(t, "secret", string(data))
}

// TestSymlinkReasons: each hidden link is hidden for its own reason.
func TestSymlinkReasons(t *testing.T) {
	root, _ := linkTree(t)
	b, _ := newBucket(t, root)
	for name, want := range map[string]error{
		"outside": errOutside, "absout": errOutside, "dangling": errDangling, "self": errLoop,
	} {
		_, _, _, err := b.resolve(name)
		var le *linkError
		require.ErrorAs(t, err, &le, name)
		assert.ErrorIs(t, err, want, name)
		assert.Equal(t, name, le.link)
	}
	_, _, _, err := b.resolve("data/up/data")
	assert.ErrorIs(t, err, errLoop, "a name through the same directory twice")
	real, fi, dirs, err := b.resolve("dirlink")
	require.NoError(t, err)
	assert.Equal(t, "data/sub", real)
	assert.True(t, fi.IsDir())
	assert.Equal(t, []string{"", "data/sub"}, dirs)
}
