package prefix

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

// store is a small in-memory bucket with real listing semantics (lexical
// order, delimiter grouping, pages whose token is the last name returned).
// It records the requests it saw so tests can check what reached the store.
type store struct {
	objects map[string]string
	// names the store answers with instead of the real ones, to simulate a
	// store that breaks its contract.
	rogue string

	stats []string
	lists []bucket.ListRequest
	reads []bucket.ReadRequest
}

var _ bucket.Bucket = (*store)(nil)

func newStore(names ...string) *store {
	s := &store{objects: map[string]string{}}
	for _, n := range names {
		s.objects[n] = "data of " + n
	}
	return s
}

func (s *store) Name() string { return "mem://b" }

func (s *store) Stat(_ context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
	s.stats = append(s.stats, req.Name)
	d, ok := s.objects[req.Name]
	if !ok {
		return nil, fmt.Errorf("%q: %w", req.Name, bucket.ErrNotFound)
	}
	name := req.Name
	if s.rogue != "" {
		name = s.rogue
	}
	return &bucket.Object{Name: name, Size: uint64(len(d)), Version: "v-" + req.Name}, nil
}

func (s *store) List(_ context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	s.lists = append(s.lists, *req)
	names := make([]string, 0, len(s.objects))
	for n := range s.objects {
		names = append(names, n)
	}
	slices.Sort(names)
	l := &bucket.Listing{}
	count := 0
	for _, n := range names {
		if !strings.HasPrefix(n, req.Prefix) || n <= req.ContinuationToken {
			continue
		}
		if req.MaxResults > 0 && count == req.MaxResults {
			break
		}
		if req.Delimiter != "" {
			if i := strings.Index(n[len(req.Prefix):], req.Delimiter); i >= 0 {
				p := n[:len(req.Prefix)+i+len(req.Delimiter)]
				if len(l.Prefixes) == 0 || l.Prefixes[len(l.Prefixes)-1] != p {
					l.Prefixes = append(l.Prefixes, p)
					count++
				}
				l.ContinuationToken = p + "\xff"
				continue
			}
		}
		if s.rogue != "" {
			n = s.rogue
		}
		l.Objects = append(l.Objects, bucket.Object{Name: n, Size: uint64(len(s.objects[n])), Version: "v-" + n})
		l.ContinuationToken = n
		count++
	}
	if req.MaxResults == 0 || count < req.MaxResults {
		l.ContinuationToken = ""
	}
	return l, nil
}

func (s *store) NewRangeReader(_ context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	s.reads = append(s.reads, *req)
	d, ok := s.objects[req.Name]
	if !ok {
		return nil, fmt.Errorf("%q: %w", req.Name, bucket.ErrNotFound)
	}
	r := req.Range.Clip(uint64(len(d)))
	return io.NopCloser(strings.NewReader(d[r.Start:r.Limit])), nil
}

func TestClean(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{in: "", want: ""},
		{in: "train", want: "train/"},
		{in: "train/", want: "train/"},
		{in: "a/b/c", want: "a/b/c/"},
		{in: "a b/ünï", want: "a b/ünï/"},
		{in: "..a/b..", want: "..a/b../"}, // dots inside a name are fine
		{in: "/train", bad: true},
		{in: "/", bad: true},
		{in: "a//b", bad: true},
		{in: "train//", bad: true},
		{in: "../x", bad: true},
		{in: "a/../b", bad: true},
		{in: "a/..", bad: true},
		{in: "./a", bad: true},
		{in: "a/./b", bad: true},
	} {
		got, err := Clean(tc.in)
		if tc.bad {
			assert.ErrorIs(t, err, bucket.ErrInvalid, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}
}

func TestNewRejectsBadPrefix(t *testing.T) {
	_, err := New(newStore(), "a/../b")
	require.ErrorIs(t, err, bucket.ErrInvalid)
	assert.Contains(t, err.Error(), `".."`)
}

func TestEmptyPrefixIsTheInnerBucket(t *testing.T) {
	s := newStore()
	b, err := New(s, "")
	require.NoError(t, err)
	assert.Same(t, s, b)
}

func TestName(t *testing.T) {
	for _, p := range []string{"train", "train/"} {
		b, err := New(newStore(), p)
		require.NoError(t, err)
		assert.Equal(t, "mem://b/train", b.Name())
	}
	b, err := New(newStore(), "a/b")
	require.NoError(t, err)
	assert.Equal(t, "mem://b/a/b", b.Name())
}

func TestStat(t *testing.T) {
	s := newStore("train/a", "trainer", "other/a")
	b, err := New(s, "train")
	require.NoError(t, err)
	ctx := context.Background()

	obj, err := b.Stat(ctx, &bucket.StatRequest{Name: "a"})
	require.NoError(t, err)
	assert.Equal(t, "a", obj.Name)
	assert.Equal(t, "v-train/a", obj.Version)
	assert.Equal(t, []string{"train/a"}, s.stats)

	_, err = b.Stat(ctx, &bucket.StatRequest{Name: "er"})
	assert.ErrorIs(t, err, bucket.ErrNotFound, "\"trainer\" is not under \"train/\"")

	_, err = b.Stat(ctx, &bucket.StatRequest{Name: ""})
	assert.ErrorIs(t, err, bucket.ErrInvalid)
}

func TestListStripsPrefix(t *testing.T) {
	s := newStore(
		"train/",      // the prefix's own marker: hidden
		"train/a",     //
		"train/d/",    // a marker inside: kept
		"train/d/x",   //
		"train/d/y/z", //
		"train/e/f",   //
		"trainer",     // outside
		"other/a",     // outside
	)
	b, err := New(s, "train/")
	require.NoError(t, err)
	ctx := context.Background()

	l, err := b.List(ctx, &bucket.ListRequest{Delimiter: "/"})
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, objectNames(l))
	assert.Equal(t, []string{"d/", "e/"}, l.Prefixes)
	assert.Equal(t, "train/", s.lists[0].Prefix)
	assert.Equal(t, "/", s.lists[0].Delimiter)

	l, err = b.List(ctx, &bucket.ListRequest{Prefix: "d/", Delimiter: "/"})
	require.NoError(t, err)
	assert.Equal(t, []string{"d/", "d/x"}, objectNames(l))
	assert.Equal(t, []string{"d/y/"}, l.Prefixes)

	l, err = b.List(ctx, &bucket.ListRequest{})
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "d/", "d/x", "d/y/z", "e/f"}, objectNames(l))
	assert.Empty(t, l.Prefixes)
}

func TestListPagesPassTokensThrough(t *testing.T) {
	s := newStore("train/1", "train/2", "train/3", "train/4", "train/5", "zzz")
	b, err := New(s, "train")
	require.NoError(t, err)
	ctx := context.Background()

	var names []string
	req := &bucket.ListRequest{MaxResults: 2}
	for {
		l, err := b.List(ctx, req)
		require.NoError(t, err)
		names = append(names, objectNames(l)...)
		if l.ContinuationToken == "" {
			break
		}
		req.ContinuationToken = l.ContinuationToken
	}
	assert.Equal(t, []string{"1", "2", "3", "4", "5"}, names)
	require.Len(t, s.lists, 3)
	// The store gets back exactly the token it issued.
	assert.Equal(t, "train/2", s.lists[1].ContinuationToken)
	assert.Equal(t, 2, s.lists[1].MaxResults)
}

func TestRead(t *testing.T) {
	s := newStore("train/a")
	b, err := New(s, "train")
	require.NoError(t, err)
	rc, err := b.NewRangeReader(context.Background(), &bucket.ReadRequest{
		Name: "a", Version: "v-train/a", Range: bucket.ByteRange{Start: 8, Limit: 100},
	})
	require.NoError(t, err)
	data, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	assert.Equal(t, "train/a", string(data))
	assert.Equal(t, []bucket.ReadRequest{{Name: "train/a", Version: "v-train/a", Range: bucket.ByteRange{Start: 8, Limit: 100}}}, s.reads)

	_, err = b.NewRangeReader(context.Background(), &bucket.ReadRequest{Name: "missing"})
	assert.ErrorIs(t, err, bucket.ErrNotFound)
	_, err = b.NewRangeReader(context.Background(), &bucket.ReadRequest{Name: ""})
	assert.ErrorIs(t, err, bucket.ErrInvalid)
}

func TestStoreAnsweringOutsidePrefixIsAnError(t *testing.T) {
	s := newStore("train/a")
	s.rogue = "elsewhere/a"
	b, err := New(s, "train")
	require.NoError(t, err)
	_, err = b.Stat(context.Background(), &bucket.StatRequest{Name: "a"})
	assert.ErrorContains(t, err, "outside the prefix")
	_, err = b.List(context.Background(), &bucket.ListRequest{})
	assert.ErrorContains(t, err, "outside the prefix")
}

func TestRequestsAreNotModified(t *testing.T) {
	b, err := New(newStore("train/a"), "train")
	require.NoError(t, err)
	sreq := &bucket.StatRequest{Name: "a"}
	lreq := &bucket.ListRequest{Prefix: "d/"}
	rreq := &bucket.ReadRequest{Name: "a"}
	_, _ = b.Stat(context.Background(), sreq)
	_, _ = b.List(context.Background(), lreq)
	rc, err := b.NewRangeReader(context.Background(), rreq)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	assert.Equal(t, "a", sreq.Name)
	assert.Equal(t, "d/", lreq.Prefix)
	assert.Equal(t, "a", rreq.Name)
}

func objectNames(l *bucket.Listing) []string {
	var names []string
	for _, o := range l.Objects {
		names = append(names, o.Name)
	}
	return names
}
