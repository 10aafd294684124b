package buckettest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/buckettest"
	"ferry/bucket/mem"
)

func TestMem(t *testing.T) {
	buckettest.Run(t, func(t *testing.T) (bucket.Bucket, bucket.Writer) {
		b := mem.New(t.Name())
		return b, b
	})
}

// broken wraps a correct bucket and breaks one promise of the contract.
type broken struct {
	*mem.Bucket
	stat func(ctx context.Context, req *bucket.StatRequest) (*bucket.Object, error)
	list func(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error)
	read func(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error)
}

func (b *broken) Stat(ctx context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
	if b.stat != nil {
		return b.stat(ctx, req)
	}
	return b.Bucket.Stat(ctx, req)
}

func (b *broken) List(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	if b.list != nil {
		return b.list(ctx, req)
	}
	return b.Bucket.List(ctx, req)
}

func (b *broken) NewRangeReader(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	if b.read != nil {
		return b.read(ctx, req)
	}
	return b.Bucket.NewRangeReader(ctx, req)
}

type dropLastByte struct {
	io.ReadCloser
	left uint64
}

func (r *dropLastByte) Read(p []byte) (int, error) {
	if r.left <= 1 {
		return 0, io.EOF
	}
	p = p[:min(uint64(len(p)), r.left-1)]
	n, err := r.ReadCloser.Read(p)
	r.left -= uint64(n)
	return n, err
}

// breakages maps a name to a bucket that breaks the contract and the
// subtest that must catch it.
var breakages = map[string]struct {
	wrap     func(m *mem.Bucket) *broken
	mustFail string
}{
	"ignores version": {func(m *mem.Bucket) *broken {
		return &broken{Bucket: m, read: func(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
			r := *req
			r.Version = ""
			return m.NewRangeReader(ctx, &r)
		}}
	}, "ReadPinnedAfterOverwrite"},
	"unsorted listing": {func(m *mem.Bucket) *broken {
		return &broken{Bucket: m, list: func(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
			l, err := m.List(ctx, req)
			if err == nil {
				slices.Reverse(l.Objects)
			}
			return l, err
		}}
	}, "ListDelimiter"},
	"drops continuation": {func(m *mem.Bucket) *broken {
		return &broken{Bucket: m, list: func(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
			l, err := m.List(ctx, req)
			if err == nil {
				l.ContinuationToken = ""
			}
			return l, err
		}}
	}, "ListPaging"},
	"short read": {func(m *mem.Bucket) *broken {
		return &broken{Bucket: m, read: func(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
			r, err := m.NewRangeReader(ctx, req)
			if err != nil {
				return nil, err
			}
			return &dropLastByte{ReadCloser: r, left: req.Range.Len()}, nil
		}}
	}, "ReadRanges"},
	"ignores ctx": {func(m *mem.Bucket) *broken {
		return &broken{Bucket: m, stat: func(ctx context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
			return m.Stat(context.Background(), req)
		}}
	}, "CanceledContext"},
	"untyped not found": {func(m *mem.Bucket) *broken {
		return &broken{Bucket: m, stat: func(ctx context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
			o, err := m.Stat(ctx, req)
			if errors.Is(err, bucket.ErrNotFound) {
				err = fmt.Errorf("404: %v", err) // %v loses the sentinel
			}
			return o, err
		}}
	}, "StatNotFound"},
}

// TestBroken runs the suite against one broken bucket; it only runs as the
// child process of TestSuiteCatchesBreakage, and is expected to fail.
func TestBroken(t *testing.T) {
	name := os.Getenv("BUCKETTEST_BROKEN")
	if name == "" {
		t.Skip("run by TestSuiteCatchesBreakage")
	}
	br := breakages[name]
	require.NotNil(t, br.wrap, "unknown breakage %q", name)
	buckettest.Run(t, func(t *testing.T) (bucket.Bucket, bucket.Writer) {
		m := mem.New(t.Name())
		return br.wrap(m), m
	})
}

// TestSuiteCatchesBreakage proves the suite can fail: each broken bucket
// must fail the subtest aimed at its breakage.
func TestSuiteCatchesBreakage(t *testing.T) {
	if os.Getenv("BUCKETTEST_BROKEN") != "" {
		t.Skip("in the child")
	}
	for name, br := range breakages {
		t.Run(name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBroken$", "-test.v")
			cmd.Env = append(os.Environ(), "BUCKETTEST_BROKEN="+name)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "suite passed a bucket that %s:\n%s", name, out)
			assert.Contains(t, string(out), "--- FAIL: TestBroken/"+br.mustFail+" ", "output:\n%s", out)
		})
	}
}
