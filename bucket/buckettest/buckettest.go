// Package buckettest is the conformance suite for bucket.Bucket: one set of
// tests that every implementation (mem, file, gcs on fake-gcs-server, s3 on
// versitygw) runs, so that the layers above can rely on one behaviour for
// listing order, delimiters, markers, ranges, version pinning and errors.
//
// It stages data only through the bucket.Writer it is given and only in the
// fresh, empty bucket each newBucket call returns; it must never touch
// anything else and never assert timings.
package buckettest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"ferry/bucket"
)

// Run runs the conformance suite. newBucket must return a fresh, empty
// bucket and a Writer for it on every call (cleanup via t.Cleanup); each
// subtest calls it once. The caller names the implementation:
//
//	t.Run("gcs", func(t *testing.T) { buckettest.Run(t, newGCS) })
func Run(t *testing.T, newBucket func(t *testing.T) (bucket.Bucket, bucket.Writer)) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, b bucket.Bucket, w bucket.Writer)
	}{
		{"Name", testName},
		{"StatAfterPut", testStatAfterPut},
		{"StatVersionChangesOnOverwrite", testStatVersionChanges},
		{"StatNotFound", testStatNotFound},
		{"Delete", testDelete},
		{"ListEmptyBucket", testListEmptyBucket},
		{"ListEmptyPrefix", testListEmptyPrefix},
		{"ListDelimiter", testListDelimiter},
		{"ListLexicalOrder", testListLexicalOrder},
		{"ListMarkerObjects", testListMarkerObjects},
		{"ListImplicitDirs", testListImplicitDirs},
		{"ListFlat", testListFlat},
		{"ListPrefixNotEndingInDelimiter", testListPartialPrefix},
		{"ListFileAndPrefixSameName", testListFileAndPrefixSameName},
		{"ListPaging", testListPaging},
		{"ListAgreesWithStat", testListAgreesWithStat},
		{"SpecialNames", testSpecialNames},
		{"LongNames", testLongNames},
		{"ReadRanges", testReadRanges},
		{"ReadTinyObjects", testReadTinyObjects},
		{"ReadNotFound", testReadNotFound},
		{"ReadPinnedCurrentVersion", testReadPinnedCurrent},
		{"ReadPinnedAfterOverwrite", testReadPinnedAfterOverwrite},
		{"ReadPinnedEmptyRangeAfterOverwrite", testReadPinnedEmptyRangeAfterOverwrite},
		{"ReadPinnedAfterDelete", testReadPinnedAfterDelete},
		{"CanceledContext", testCanceledContext},
		{"CancelDuringRead", testCancelDuringRead},
		{"ConcurrentReads", testConcurrentReads},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, w := newBucket(t)
			require.NotNil(t, b, "newBucket returned a nil Bucket")
			require.NotNil(t, w, "newBucket returned a nil Writer")
			tc.fn(t, b, w)
		})
	}
}

// ---------------------------------------------------------------------------
// Helpers

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// payload returns n deterministic bytes that differ between seeds at every
// position, so a read of the wrong version can never look right.
func payload(n int, seed byte) []byte {
	p := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range p {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		// Low bits carry the seed so two seeds never agree on a byte.
		p[i] = byte(x)&^7 | seed&7
	}
	return p
}

func put(t *testing.T, w bucket.Writer, name string, data []byte) *bucket.Object {
	t.Helper()
	o, err := w.Put(t.Context(), &bucket.PutRequest{Name: name, Data: data})
	require.NoError(t, err, "Put(%q)", name)
	require.NotNil(t, o, "Put(%q) returned nil object", name)
	return o
}

func stat(t *testing.T, b bucket.Bucket, name string) *bucket.Object {
	t.Helper()
	o, err := b.Stat(t.Context(), &bucket.StatRequest{Name: name})
	require.NoError(t, err, "Stat(%q)", name)
	require.NotNil(t, o, "Stat(%q) returned nil object", name)
	return o
}

// checkObject checks what Stat (or List) says about an object holding data.
func checkObject(t *testing.T, o *bucket.Object, name string, data []byte) {
	t.Helper()
	assert.Equal(t, name, o.Name, "Name")
	assert.Equal(t, uint64(len(data)), o.Size, "Size of %q", name)
	assert.NotEmpty(t, o.Version, "Version of %q", name)
	assert.False(t, o.Updated.IsZero(), "Updated of %q is zero", name)
	if o.HasCRC32C {
		assert.Equal(t, crc32.Checksum(data, castagnoli), o.CRC32C, "CRC32C of %q", name)
	}
}

// readAll drains r in small reads and returns the bytes and the error that
// ended the stream (io.EOF on success). It fails the test on a reader that
// keeps returning (0, nil).
func readAll(t *testing.T, r io.Reader) ([]byte, error) {
	t.Helper()
	var out []byte
	buf := make([]byte, 32<<10)
	zeros := 0
	for {
		n, err := r.Read(buf)
		if n < 0 || n > len(buf) {
			t.Fatalf("Read returned n=%d for a %d-byte buffer", n, len(buf))
		}
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
		if n == 0 {
			zeros++
			if zeros > 100 {
				t.Fatalf("reader returned (0, nil) %d times in a row", zeros)
			}
		} else {
			zeros = 0
		}
	}
}

// read opens req and reads it to the end. The error is the open error or
// the error that ended the stream; a clean stream returns (data, nil).
func read(ctx context.Context, t *testing.T, b bucket.Bucket, req *bucket.ReadRequest) ([]byte, error) {
	t.Helper()
	r, err := b.NewRangeReader(ctx, req)
	if err != nil {
		return nil, err
	}
	require.NotNil(t, r, "NewRangeReader(%q) returned nil reader and nil error", req.Name)
	data, err := readAll(t, r)
	cerr := r.Close()
	if err == io.EOF { // the contract: exactly io.EOF, not wrapped
		assert.NoError(t, cerr, "Close after EOF")
		return data, nil
	}
	return data, err
}

// readOK reads req and requires exactly want followed by io.EOF.
func readOK(t *testing.T, b bucket.Bucket, req *bucket.ReadRequest, want []byte) {
	t.Helper()
	got, err := read(t.Context(), t, b, req)
	require.NoError(t, err, "read %q %v", req.Name, req.Range)
	if !bytes.Equal(want, got) {
		t.Fatalf("read %q %v: got %d bytes, want %d (first difference at %d)",
			req.Name, req.Range, len(got), len(want), firstDiff(want, got))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// listAll follows continuation tokens and returns every object and prefix,
// checking per-page invariants on the way.
func listAll(t *testing.T, b bucket.Bucket, req bucket.ListRequest) (objs []bucket.Object, prefixes []string, pages int) {
	t.Helper()
	seenTokens := map[string]bool{}
	for {
		page, err := b.List(t.Context(), &req)
		require.NoError(t, err, "List(%+v)", req)
		require.NotNil(t, page, "List returned nil listing")
		pages++
		if req.MaxResults > 0 {
			require.LessOrEqual(t, len(page.Objects)+len(page.Prefixes), req.MaxResults,
				"page %d has more than MaxResults entries", pages)
		}
		for _, o := range page.Objects {
			require.True(t, strings.HasPrefix(o.Name, req.Prefix), "object %q outside prefix %q", o.Name, req.Prefix)
			if req.Delimiter != "" {
				rest := o.Name[len(req.Prefix):]
				require.NotContains(t, rest, req.Delimiter,
					"object %q should have been folded into a prefix", o.Name)
			}
		}
		for _, p := range page.Prefixes {
			require.NotEmpty(t, req.Delimiter, "prefix %q returned without a delimiter", p)
			require.True(t, strings.HasPrefix(p, req.Prefix), "prefix %q outside prefix %q", p, req.Prefix)
			require.True(t, strings.HasSuffix(p, req.Delimiter), "prefix %q does not end in delimiter", p)
		}
		objs = append(objs, page.Objects...)
		prefixes = append(prefixes, page.Prefixes...)
		if page.ContinuationToken == "" {
			return objs, prefixes, pages
		}
		require.False(t, seenTokens[page.ContinuationToken], "continuation token %q repeated", page.ContinuationToken)
		seenTokens[page.ContinuationToken] = true
		require.Less(t, pages, 10000, "listing does not end")
		req.ContinuationToken = page.ContinuationToken
	}
}

func names(objs []bucket.Object) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.Name)
	}
	return out
}

// listNames lists (following pages) and requires the exact, ordered result.
func listNames(t *testing.T, b bucket.Bucket, prefix, delim string, wantObjs, wantPrefixes []string) []bucket.Object {
	t.Helper()
	objs, prefixes, _ := listAll(t, b, bucket.ListRequest{Prefix: prefix, Delimiter: delim})
	if wantObjs == nil {
		wantObjs = []string{}
	}
	if wantPrefixes == nil {
		wantPrefixes = []string{}
	}
	if prefixes == nil {
		prefixes = []string{}
	}
	require.Equal(t, wantObjs, names(objs), "objects of List(prefix=%q, delimiter=%q)", prefix, delim)
	require.Equal(t, wantPrefixes, prefixes, "prefixes of List(prefix=%q, delimiter=%q)", prefix, delim)
	return objs
}

// putAll stages every name with data derived from the name, with bounded
// parallelism so that emulators are not flooded.
func putAll(t *testing.T, w bucket.Writer, names []string, data func(name string) []byte) {
	t.Helper()
	g, ctx := errgroup.WithContext(t.Context())
	g.SetLimit(16)
	for _, n := range names {
		g.Go(func() error {
			if _, err := w.Put(ctx, &bucket.PutRequest{Name: n, Data: data(n)}); err != nil {
				return fmt.Errorf("Put(%q): %w", n, err)
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
}

// ---------------------------------------------------------------------------
// Stat, Put, Delete

func testName(t *testing.T, b bucket.Bucket, _ bucket.Writer) {
	assert.NotEmpty(t, b.Name())
}

func testStatAfterPut(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	data := payload(1000, 1)
	before := time.Now()
	p := put(t, w, "stat/obj", data)
	checkObject(t, p, "stat/obj", data)

	o := stat(t, b, "stat/obj")
	checkObject(t, o, "stat/obj", data)
	assert.Equal(t, p.Version, o.Version, "Put and Stat disagree on the version")
	// A loose bound: the emulator runs on this machine's clock, but the
	// store may truncate to seconds.
	assert.WithinDuration(t, before, o.Updated, time.Hour, "Updated")

	readOK(t, b, &bucket.ReadRequest{Name: "stat/obj", Range: bucket.ByteRange{Start: 0, Limit: 1000}}, data)
}

func testStatVersionChanges(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	const name = "version/obj"
	v1 := put(t, w, name, payload(100, 1))
	o1 := stat(t, b, name)
	require.Equal(t, v1.Version, o1.Version)

	// Same size, different bytes: the version must still change.
	data2 := payload(100, 2)
	v2 := put(t, w, name, data2)
	o2 := stat(t, b, name)
	checkObject(t, o2, name, data2)
	require.Equal(t, v2.Version, o2.Version)
	assert.NotEqual(t, o1.Version, o2.Version, "version unchanged by an overwrite")

	data3 := payload(300, 3)
	put(t, w, name, data3)
	o3 := stat(t, b, name)
	checkObject(t, o3, name, data3)
	assert.NotEqual(t, o1.Version, o3.Version)
	assert.NotEqual(t, o2.Version, o3.Version)

	// An unpinned read sees the newest content.
	readOK(t, b, &bucket.ReadRequest{Name: name, Range: bucket.ByteRange{Limit: 300}}, data3)
}

func testStatNotFound(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	put(t, w, "nf/dir/obj", []byte("x"))
	for _, name := range []string{
		"missing",
		"nf/missing",
		"nf/dir/ob",   // a proper prefix of a name
		"nf/dir/obj2", // a name extending one
		"nf/dir",      // an implicit directory is not an object
		"nf/dir/",     // nor is its marker, unless written
		"nf",
	} {
		o, err := b.Stat(t.Context(), &bucket.StatRequest{Name: name})
		assert.ErrorIs(t, err, bucket.ErrNotFound, "Stat(%q) = %+v", name, o)
	}
}

func testDelete(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	put(t, w, "del/a", []byte("aaa"))
	put(t, w, "del/b", []byte("bbb"))
	require.NoError(t, w.Delete(t.Context(), "del/a"))

	_, err := b.Stat(t.Context(), &bucket.StatRequest{Name: "del/a"})
	require.ErrorIs(t, err, bucket.ErrNotFound)
	_, err = read(t.Context(), t, b, &bucket.ReadRequest{Name: "del/a", Range: bucket.ByteRange{Limit: 3}})
	require.ErrorIs(t, err, bucket.ErrNotFound)
	listNames(t, b, "del/", "/", []string{"del/b"}, nil)

	err = w.Delete(t.Context(), "del/a")
	require.ErrorIs(t, err, bucket.ErrNotFound, "deleting a missing object")
}

// ---------------------------------------------------------------------------
// List

func testListEmptyBucket(t *testing.T, b bucket.Bucket, _ bucket.Writer) {
	for _, delim := range []string{"/", ""} {
		page, err := b.List(t.Context(), &bucket.ListRequest{Delimiter: delim})
		require.NoError(t, err)
		assert.Empty(t, page.Objects)
		assert.Empty(t, page.Prefixes)
		assert.Empty(t, page.ContinuationToken)
	}
}

func testListEmptyPrefix(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	put(t, w, "x/y", []byte("y"))
	for _, req := range []bucket.ListRequest{
		{Prefix: "nothing/", Delimiter: "/"},
		{Prefix: "nothing/", Delimiter: ""},
		{Prefix: "x/y/", Delimiter: "/"}, // an object's name used as a directory
		{Prefix: "x/z", Delimiter: "/"},
		{Prefix: "y", Delimiter: "/", MaxResults: 10},
	} {
		page, err := b.List(t.Context(), &req)
		require.NoError(t, err, "List(%+v)", req)
		assert.Empty(t, page.Objects, "List(%+v)", req)
		assert.Empty(t, page.Prefixes, "List(%+v)", req)
		assert.Empty(t, page.ContinuationToken, "List(%+v)", req)
	}
}

func testListDelimiter(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	all := []string{"l/a", "l/b", "l/c/d", "l/c/e", "l/f/g/h", "l/z", "lx"}
	putAll(t, w, all, func(n string) []byte { return []byte("data of " + n) })

	objs := listNames(t, b, "l/", "/", []string{"l/a", "l/b", "l/z"}, []string{"l/c/", "l/f/"})
	// Listed objects carry what Stat says: fs pins reads to listed versions.
	for _, o := range objs {
		s := stat(t, b, o.Name)
		checkObject(t, &o, o.Name, []byte("data of "+o.Name))
		assert.Equal(t, s.Version, o.Version, "List and Stat disagree on the version of %q", o.Name)
		assert.Equal(t, s.Size, o.Size)
	}
	listNames(t, b, "", "/", []string{"lx"}, []string{"l/"})
	listNames(t, b, "l/c/", "/", []string{"l/c/d", "l/c/e"}, nil)
	listNames(t, b, "l/f/", "/", nil, []string{"l/f/g/"})
}

func testListLexicalOrder(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	// Byte order, not directory-walk order: '-' (0x2d) and '.' (0x2e) sort
	// before '/' (0x2f), '0' after it; upper case before lower case;
	// multi-byte UTF-8 last.
	all := []string{"o/a-b", "o/a.b", "o/a/x", "o/a0", "o/B", "o/é", "o/z", "o/a/-", "o/a/b/c", "o/a/b-c"}
	putAll(t, w, all, func(n string) []byte { return []byte(n) })
	want := slices.Clone(all)
	slices.Sort(want)
	listNames(t, b, "o/", "", want, nil)
	listNames(t, b, "o/", "/", []string{"o/B", "o/a-b", "o/a.b", "o/a0", "o/z", "o/é"}, []string{"o/a/"})
	listNames(t, b, "o/a/", "/", []string{"o/a/-", "o/a/b-c", "o/a/x"}, []string{"o/a/b/"})
}

// putAllOrSkipConflicts stages names that include both "x" and "x/...";
// stores backed by a directory tree cannot hold both, and for them the
// conflicting file is left out (the rest of the test still runs).
func putAllOrSkipConflicts(t *testing.T, w bucket.Writer, all []string) {
	t.Helper()
	var failed []string
	for _, n := range all {
		if _, err := w.Put(t.Context(), &bucket.PutRequest{Name: n, Data: []byte(n)}); err != nil {
			failed = append(failed, fmt.Sprintf("%q: %v", n, err))
		}
	}
	if len(failed) > 0 {
		t.Skipf("store cannot hold an object and a prefix of the same name: %v", failed)
	}
}

func testListMarkerObjects(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	_, err := w.Put(t.Context(), &bucket.PutRequest{Name: "m/dir/"})
	if errors.Is(err, bucket.ErrInvalid) {
		t.Skipf("store cannot hold directory markers: %v", err)
	}
	require.NoError(t, err, "Put marker")
	put(t, w, "m/dir/file", []byte("f"))
	put(t, w, "m/empty/", nil)

	o := stat(t, b, "m/dir/")
	checkObject(t, o, "m/dir/", nil)

	listNames(t, b, "m/", "/", nil, []string{"m/dir/", "m/empty/"})
	objs := listNames(t, b, "m/dir/", "/", []string{"m/dir/", "m/dir/file"}, nil)
	assert.Equal(t, uint64(0), objs[0].Size)
	listNames(t, b, "m/empty/", "/", []string{"m/empty/"}, nil)
	listNames(t, b, "m/", "", []string{"m/dir/", "m/dir/file", "m/empty/"}, nil)
	readOK(t, b, &bucket.ReadRequest{Name: "m/dir/", Range: bucket.ByteRange{Limit: 10}}, nil)
}

func testListImplicitDirs(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	put(t, w, "a/b/c", []byte("c"))
	listNames(t, b, "", "/", nil, []string{"a/"})
	listNames(t, b, "a/", "/", nil, []string{"a/b/"})
	listNames(t, b, "a/b/", "/", []string{"a/b/c"}, nil)
	for _, name := range []string{"a", "a/", "a/b", "a/b/"} {
		_, err := b.Stat(t.Context(), &bucket.StatRequest{Name: name})
		assert.ErrorIs(t, err, bucket.ErrNotFound, "Stat(%q) of an implicit directory", name)
	}
}

// testListAgreesWithStat: a listing names each object by the same
// version and size as Stat does. ferry keys its disk cache and its
// readahead by them: a file opened ahead from the listing and then by its
// reader (from Stat) must be one object, or its bytes are fetched and
// cached twice.
func testListAgreesWithStat(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	names := []string{"v/a", "v/b", "v/c"}
	putAll(t, w, names, func(n string) []byte { return bytes.Repeat([]byte(n), 1000) })
	put(t, w, "v/b", []byte("overwritten")) // a second version
	for _, o := range listNames(t, b, "v/", "/", names, nil) {
		s := stat(t, b, o.Name)
		assert.Equal(t, s.Version, o.Version, "List and Stat disagree on the version of %q", o.Name)
		assert.Equal(t, s.Size, o.Size, "List and Stat disagree on the size of %q", o.Name)
	}
}

func testListFlat(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	putAll(t, w, []string{"f/1", "f/d/2", "f/d/e/3", "g"}, func(n string) []byte { return []byte(n) })
	listNames(t, b, "f/", "", []string{"f/1", "f/d/2", "f/d/e/3"}, nil)
	listNames(t, b, "", "", []string{"f/1", "f/d/2", "f/d/e/3", "g"}, nil)
	listNames(t, b, "f/d", "", []string{"f/d/2", "f/d/e/3"}, nil)
}

func testListPartialPrefix(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	putAll(t, w, []string{"p/file1", "p/file2", "p/fi/x", "p/other", "p/f"},
		func(n string) []byte { return []byte(n) })
	listNames(t, b, "p/fi", "/", []string{"p/file1", "p/file2"}, []string{"p/fi/"})
	listNames(t, b, "p/fi", "", []string{"p/fi/x", "p/file1", "p/file2"}, nil)
}

func testListFileAndPrefixSameName(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	putAllOrSkipConflicts(t, w, []string{"same/x", "same/x/y"})
	listNames(t, b, "same/", "/", []string{"same/x"}, []string{"same/x/"})
	listNames(t, b, "same/x/", "/", []string{"same/x/y"}, nil)
	readOK(t, b, &bucket.ReadRequest{Name: "same/x", Range: bucket.ByteRange{Limit: 100}}, []byte("same/x"))
}

func testListPaging(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	// More than one default page (1000) of objects, plus sub-prefixes that
	// must be paged like objects.
	const nObjs, nDirs = 1080, 20
	var objNames, dirNames, flat []string
	for i := range nObjs {
		objNames = append(objNames, fmt.Sprintf("page/o%04d", i))
	}
	for i := range nDirs {
		dirNames = append(dirNames, fmt.Sprintf("page/d%02d/", i))
		flat = append(flat, fmt.Sprintf("page/d%02d/x", i))
	}
	flat = append(flat, objNames...)
	putAll(t, w, flat, func(n string) []byte { return []byte(n[len(n)-1:]) })
	slices.Sort(objNames)
	slices.Sort(flat)

	for _, max := range []int{0, 100, 333} {
		t.Run(fmt.Sprintf("delimiter/max=%d", max), func(t *testing.T) {
			objs, prefixes, pages := listAll(t, b, bucket.ListRequest{Prefix: "page/", Delimiter: "/", MaxResults: max})
			got := names(objs)
			// Exact union in order: no duplicates, nothing lost across pages.
			require.Equal(t, objNames, got)
			require.Equal(t, dirNames, prefixes)
			if max > 0 {
				assert.GreaterOrEqual(t, pages, (nObjs+nDirs+max-1)/max)
			}
			for _, o := range objs {
				require.Equal(t, uint64(1), o.Size, "%q", o.Name)
				require.NotEmpty(t, o.Version, "%q", o.Name)
			}
		})
		t.Run(fmt.Sprintf("flat/max=%d", max), func(t *testing.T) {
			objs, prefixes, _ := listAll(t, b, bucket.ListRequest{Prefix: "page/", MaxResults: max})
			require.Equal(t, flat, names(objs))
			require.Empty(t, prefixes)
		})
	}
}

// ---------------------------------------------------------------------------
// Names

func testSpecialNames(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	all := []string{
		"names/with space",
		"names/ trailing and leading ",
		"names/ünïcödé-日本語-🙂",
		"names/100%",
		"names/%41%2F",
		"names/a+b",
		"names/hash#tag",
		"names/question?mark",
		"names/amp&and=eq",
		"names/semi;colon,comma",
		"names/quote'",
		"names/tilde~star*",
		"names/paren(s) [b]",
		"names/dir with space/obj",
	}
	putAll(t, w, all, func(n string) []byte { return []byte("content of " + n) })
	for _, n := range all {
		data := []byte("content of " + n)
		o := stat(t, b, n)
		checkObject(t, o, n, data)
		readOK(t, b, &bucket.ReadRequest{Name: n, Version: o.Version, Range: bucket.ByteRange{Limit: uint64(len(data))}}, data)
	}
	want := slices.Clone(all)
	slices.Sort(want)
	listNames(t, b, "names/", "", want, nil)
	var top []string
	for _, n := range want {
		if !strings.Contains(n[len("names/"):], "/") {
			top = append(top, n)
		}
	}
	listNames(t, b, "names/", "/", top, []string{"names/dir with space/"})
	listNames(t, b, "names/dir with space/", "/", []string{"names/dir with space/obj"}, nil)
}

func testLongNames(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	// 1024 bytes is the GCS and S3 limit. Components stay below 255 bytes
	// so that stores backed by a file system can hold it too.
	var sb strings.Builder
	sb.WriteString("long/")
	for sb.Len() < 1024 {
		comp := strings.Repeat(string(rune('a'+sb.Len()%26)), min(200, 1024-sb.Len()))
		sb.WriteString(comp)
		if sb.Len() < 1023 {
			sb.WriteString("/")
		}
	}
	name := sb.String()
	require.Len(t, name, 1024)
	require.False(t, strings.HasSuffix(name, "/"))

	data := payload(77, 4)
	put(t, w, name, data)
	o := stat(t, b, name)
	checkObject(t, o, name, data)
	readOK(t, b, &bucket.ReadRequest{Name: name, Version: o.Version, Range: bucket.ByteRange{Limit: 1 << 20}}, data)
	listNames(t, b, "long/", "", []string{name}, nil)
	dir := name[:strings.LastIndex(name, "/")+1]
	listNames(t, b, dir, "/", []string{name}, nil)

	t.Run("SingleComponent", func(t *testing.T) {
		single := "x" + strings.Repeat("é", (1024-1)/2) // 1 + 1022 bytes of 2-byte runes
		single += strings.Repeat("y", 1024-len(single))
		require.Len(t, single, 1024)
		if _, err := w.Put(t.Context(), &bucket.PutRequest{Name: single, Data: data}); err != nil {
			t.Skipf("store cannot hold a 1024-byte path component: %v", err)
		}
		o := stat(t, b, single)
		checkObject(t, o, single, data)
		readOK(t, b, &bucket.ReadRequest{Name: single, Range: bucket.ByteRange{Limit: 77}}, data)
		listNames(t, b, "x", "/", []string{single}, nil)
	})
}

// ---------------------------------------------------------------------------
// Reads

func testReadRanges(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	const size = 100_003 // odd, not a power of two
	data := payload(size, 5)
	o := put(t, w, "range/obj", data)
	for _, tc := range []struct {
		name string
		r    bucket.ByteRange
	}{
		{"whole", bucket.ByteRange{Start: 0, Limit: size}},
		{"start", bucket.ByteRange{Start: 0, Limit: 10}},
		{"first byte", bucket.ByteRange{Start: 0, Limit: 1}},
		{"middle", bucket.ByteRange{Start: 4096, Limit: 70_001}},
		{"end", bucket.ByteRange{Start: size - 10, Limit: size}},
		{"last byte", bucket.ByteRange{Start: size - 1, Limit: size}},
		{"past end clipped", bucket.ByteRange{Start: size - 10, Limit: size + 1000}},
		{"whole past end clipped", bucket.ByteRange{Start: 0, Limit: 1 << 40}},
		{"start at size", bucket.ByteRange{Start: size, Limit: size + 10}},
		{"start beyond size", bucket.ByteRange{Start: size + 10, Limit: size + 20}},
		{"empty range", bucket.ByteRange{Start: 5, Limit: 5}},
		{"empty range at 0", bucket.ByteRange{Start: 0, Limit: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.r.Clip(size)
			want := data[c.Start:c.Limit]
			readOK(t, b, &bucket.ReadRequest{Name: "range/obj", Range: tc.r}, want)
			readOK(t, b, &bucket.ReadRequest{Name: "range/obj", Version: o.Version, Range: tc.r}, want)
		})
	}
}

func testReadTinyObjects(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	zero := put(t, w, "tiny/zero", nil)
	one := put(t, w, "tiny/one", []byte{0x7f})
	assert.Equal(t, uint64(0), stat(t, b, "tiny/zero").Size)
	assert.Equal(t, uint64(1), stat(t, b, "tiny/one").Size)
	for _, r := range []bucket.ByteRange{{Start: 0, Limit: 0}, {Start: 0, Limit: 1}, {Start: 0, Limit: 100}, {Start: 1, Limit: 2}, {Start: 5, Limit: 10}} {
		readOK(t, b, &bucket.ReadRequest{Name: "tiny/zero", Range: r}, nil)
		readOK(t, b, &bucket.ReadRequest{Name: "tiny/zero", Version: zero.Version, Range: r}, nil)
		c := r.Clip(1)
		want := []byte{0x7f}[c.Start:c.Limit]
		readOK(t, b, &bucket.ReadRequest{Name: "tiny/one", Range: r}, want)
		readOK(t, b, &bucket.ReadRequest{Name: "tiny/one", Version: one.Version, Range: r}, want)
	}
}

func testReadNotFound(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	put(t, w, "rnf/dir/obj", []byte("x"))
	for _, req := range []bucket.ReadRequest{
		{Name: "missing", Range: bucket.ByteRange{Limit: 10}},
		{Name: "missing", Range: bucket.ByteRange{}}, // empty range still checks existence
		{Name: "rnf/dir", Range: bucket.ByteRange{Limit: 10}},
		{Name: "rnf/dir/", Range: bucket.ByteRange{Limit: 10}},
		{Name: "rnf/dir/ob", Range: bucket.ByteRange{Limit: 10}},
	} {
		data, err := read(t.Context(), t, b, &req)
		assert.ErrorIs(t, err, bucket.ErrNotFound, "read %q %v", req.Name, req.Range)
		assert.Empty(t, data)
	}
}

func testReadPinnedCurrent(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	data := payload(5000, 6)
	put(t, w, "pin/obj", data)
	o := stat(t, b, "pin/obj")
	readOK(t, b, &bucket.ReadRequest{Name: "pin/obj", Version: o.Version, Range: bucket.ByteRange{Start: 100, Limit: 4000}}, data[100:4000])
	readOK(t, b, &bucket.ReadRequest{Name: "pin/obj", Version: o.Version, Range: bucket.ByteRange{Start: 0, Limit: 5000}}, data)
}

// requirePrecondition checks a pinned read of a changed object: it fails with
// ErrPrecondition and returned nothing but (at most) bytes of the old data.
func requirePrecondition(t *testing.T, got []byte, err error, old []byte, allowNotFound bool) {
	t.Helper()
	if allowNotFound && errors.Is(err, bucket.ErrNotFound) {
		// fine
	} else {
		require.ErrorIs(t, err, bucket.ErrPrecondition, "pinned read of a changed object")
	}
	require.True(t, bytes.HasPrefix(old, got),
		"pinned read returned %d bytes that are not the pinned version's", len(got))
}

func testReadPinnedAfterOverwrite(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	old := payload(64<<10, 7)
	newData := payload(64<<10, 8) // same size, differs at every byte
	put(t, w, "pin/obj", old)
	o := stat(t, b, "pin/obj")
	put(t, w, "pin/obj", newData)

	for _, r := range []bucket.ByteRange{{Start: 0, Limit: 64 << 10}, {Start: 1000, Limit: 2000}, {Start: 0, Limit: 1}} {
		got, err := read(t.Context(), t, b, &bucket.ReadRequest{Name: "pin/obj", Version: o.Version, Range: r})
		requirePrecondition(t, got, err, old[r.Start:r.Limit], false)
	}
	// The new version reads fine, pinned or not.
	n := stat(t, b, "pin/obj")
	readOK(t, b, &bucket.ReadRequest{Name: "pin/obj", Version: n.Version, Range: bucket.ByteRange{Limit: 64 << 10}}, newData)
	readOK(t, b, &bucket.ReadRequest{Name: "pin/obj", Range: bucket.ByteRange{Limit: 64 << 10}}, newData)
}

func testReadPinnedEmptyRangeAfterOverwrite(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	put(t, w, "pin/obj", payload(10, 1))
	o := stat(t, b, "pin/obj")
	put(t, w, "pin/obj", payload(20, 2))
	for _, r := range []bucket.ByteRange{{Start: 0, Limit: 0}, {Start: 15, Limit: 30}} {
		got, err := read(t.Context(), t, b, &bucket.ReadRequest{Name: "pin/obj", Version: o.Version, Range: r})
		requirePrecondition(t, got, err, nil, false)
	}
}

func testReadPinnedAfterDelete(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	old := payload(1000, 9)
	put(t, w, "pin/obj", old)
	o := stat(t, b, "pin/obj")
	require.NoError(t, w.Delete(t.Context(), "pin/obj"))
	got, err := read(t.Context(), t, b, &bucket.ReadRequest{Name: "pin/obj", Version: o.Version, Range: bucket.ByteRange{Limit: 1000}})
	requirePrecondition(t, got, err, old, true)

	// Recreated (with other bytes): still not the pinned version.
	put(t, w, "pin/obj", payload(1000, 10))
	got, err = read(t.Context(), t, b, &bucket.ReadRequest{Name: "pin/obj", Version: o.Version, Range: bucket.ByteRange{Limit: 1000}})
	requirePrecondition(t, got, err, old, false)
}

func testCanceledContext(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	data := payload(1000, 11)
	o := put(t, w, "cancel/obj", data)

	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()

	for name, ctx := range map[string]context.Context{"canceled": canceled, "expired": expired} {
		t.Run(name, func(t *testing.T) {
			_, err := b.Stat(ctx, &bucket.StatRequest{Name: "cancel/obj"})
			assert.ErrorIs(t, err, bucket.ErrCanceled, "Stat")
			_, err = b.List(ctx, &bucket.ListRequest{Prefix: "cancel/", Delimiter: "/"})
			assert.ErrorIs(t, err, bucket.ErrCanceled, "List")
			got, err := read(ctx, t, b, &bucket.ReadRequest{Name: "cancel/obj", Range: bucket.ByteRange{Limit: 1000}})
			assert.ErrorIs(t, err, bucket.ErrCanceled, "read")
			assert.True(t, bytes.HasPrefix(data, got))
			_, err = read(ctx, t, b, &bucket.ReadRequest{Name: "cancel/obj", Version: o.Version, Range: bucket.ByteRange{Limit: 1000}})
			assert.ErrorIs(t, err, bucket.ErrCanceled, "pinned read")
			assert.False(t, bucket.IsRetryable(err), "a cancelled read must not be retried")
		})
	}
}

func testCancelDuringRead(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	// Large enough that the body cannot all be in flight when we cancel.
	const size = 4 << 20
	data := payload(size, 12)
	put(t, w, "cancel/big", data)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r, err := b.NewRangeReader(ctx, &bucket.ReadRequest{Name: "cancel/big", Range: bucket.ByteRange{Limit: size}})
	require.NoError(t, err)
	defer r.Close()
	head := make([]byte, 1024)
	_, err = io.ReadFull(r, head)
	require.NoError(t, err)
	require.Equal(t, data[:1024], head)

	cancel()
	rest, err := readAll(t, r)
	require.ErrorIs(t, err, bucket.ErrCanceled, "reading on after cancel (%d more bytes)", len(rest))
	require.Less(t, len(rest), size-1024, "the whole body was returned despite the cancel")
	require.True(t, bytes.HasPrefix(data[1024:], rest), "wrong bytes before the cancel took effect")
}

func testConcurrentReads(t *testing.T, b bucket.Bucket, w bucket.Writer) {
	const size = 256 << 10
	data := payload(size, 13)
	o := put(t, w, "conc/obj", data)

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 {
				start := uint64((g*7919 + i*31337) % size)
				r := bucket.ByteRange{Start: start, Limit: start + uint64(16<<10*(i+1))}
				if i == 3 {
					r = bucket.ByteRange{Start: 0, Limit: size}
				}
				c := r.Clip(size)
				rd, err := b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "conc/obj", Version: o.Version, Range: r})
				if err != nil {
					errs <- fmt.Errorf("goroutine %d: open %v: %w", g, r, err)
					return
				}
				got, err := io.ReadAll(rd) // io.ReadAll turns io.EOF into nil
				rd.Close()
				if err != nil {
					errs <- fmt.Errorf("goroutine %d: read %v: %w", g, r, err)
					return
				}
				if !bytes.Equal(data[c.Start:c.Limit], got) {
					errs <- fmt.Errorf("goroutine %d: read %v: wrong bytes (%d, want %d)", g, r, len(got), c.Len())
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
