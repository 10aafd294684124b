// Package prefix is a bucket.Bucket decorator that mounts a sub-folder of a
// bucket: with prefix "train/", the name "a/b" reaches the store as
// "train/a/b", and names coming back have "train/" stripped.
//
// It must never let a caller see or reach an object outside the prefix, and
// never accept a prefix that could be read two ways (leading "/", empty,
// "." or ".." components).
package prefix

import (
	"context"
	"fmt"
	"io"
	"strings"

	"ferry/bucket"
)

// Bucket shows the objects under one prefix of the bucket it wraps.
type Bucket struct {
	// Dependencies
	inner bucket.Bucket

	// Constant data
	// prefix is non-empty and ends in "/".
	prefix string
}

var _ bucket.Bucket = (*Bucket)(nil)

// Clean validates p and returns it normalised to end in exactly one "/"
// ("train" and "train/" both give "train/"); "" stays "". Errors match
// bucket.ErrInvalid.
func Clean(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%w: prefix %q starts with \"/\"", bucket.ErrInvalid, p)
	}
	trimmed := strings.TrimSuffix(p, "/")
	for _, c := range strings.Split(trimmed, "/") {
		switch c {
		case "":
			return "", fmt.Errorf("%w: prefix %q has an empty component (\"//\")", bucket.ErrInvalid, p)
		case ".", "..":
			return "", fmt.Errorf("%w: prefix %q has a %q component", bucket.ErrInvalid, p, c)
		}
	}
	return trimmed + "/", nil
}

// New wraps b so that it shows only the objects under p (see Clean). An
// empty p returns b itself: there is nothing to add or strip. Errors match
// bucket.ErrInvalid.
func New(b bucket.Bucket, p string) (bucket.Bucket, error) {
	clean, err := Clean(p)
	if err != nil {
		return nil, err
	}
	if clean == "" {
		return b, nil
	}
	return &Bucket{inner: b, prefix: clean}, nil
}

// Name is the inner name with the prefix appended as a path, e.g.
// "gs://data/train", so cache keys differ per sub-folder.
func (b *Bucket) Name() string {
	return strings.TrimSuffix(b.inner.Name(), "/") + "/" + strings.TrimSuffix(b.prefix, "/")
}

// Prefix is the normalised prefix, ending in "/".
func (b *Bucket) Prefix() string { return b.prefix }

// strip removes the prefix from a name the store returned; a name outside
// the prefix means the store broke its contract.
func (b *Bucket) strip(name string) (string, error) {
	rel, ok := strings.CutPrefix(name, b.prefix)
	if !ok {
		return "", fmt.Errorf("prefix %q: store %s returned %q outside the prefix", b.prefix, b.inner.Name(), name)
	}
	return rel, nil
}

// Stat stats prefix+name. The empty name is refused: under a prefix it
// would name the prefix's own directory marker.
func (b *Bucket) Stat(ctx context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
	if req.Name == "" {
		return nil, fmt.Errorf("%w: stat of the empty name", bucket.ErrInvalid)
	}
	obj, err := b.inner.Stat(ctx, &bucket.StatRequest{Name: b.prefix + req.Name})
	if err != nil {
		return nil, err
	}
	out := *obj
	if out.Name, err = b.strip(obj.Name); err != nil {
		return nil, err
	}
	return &out, nil
}

// List lists prefix+req.Prefix. Continuation tokens pass through
// unchanged: they are opaque and only ever handed back to the same store.
// The prefix's own directory marker (which would have the empty name) is
// left out, as an unprefixed bucket has no object named "".
func (b *Bucket) List(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	inner := *req
	inner.Prefix = b.prefix + req.Prefix
	l, err := b.inner.List(ctx, &inner)
	if err != nil {
		return nil, err
	}
	out := &bucket.Listing{
		Objects:           make([]bucket.Object, 0, len(l.Objects)),
		Prefixes:          make([]string, 0, len(l.Prefixes)),
		ContinuationToken: l.ContinuationToken,
	}
	for _, o := range l.Objects {
		if o.Name, err = b.strip(o.Name); err != nil {
			return nil, err
		}
		if o.Name == "" {
			continue
		}
		out.Objects = append(out.Objects, o)
	}
	for _, p := range l.Prefixes {
		rel, err := b.strip(p)
		if err != nil {
			return nil, err
		}
		out.Prefixes = append(out.Prefixes, rel)
	}
	return out, nil
}

// NewRangeReader reads prefix+req.Name.
func (b *Bucket) NewRangeReader(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	if req.Name == "" {
		return nil, fmt.Errorf("%w: read of the empty name", bucket.ErrInvalid)
	}
	inner := *req
	inner.Name = b.prefix + req.Name
	return b.inner.NewRangeReader(ctx, &inner)
}
