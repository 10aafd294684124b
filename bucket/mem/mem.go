// Package mem is an in-memory bucket.Bucket and bucket.Writer with the real
// semantics of an object store (generations as versions, lexical listing
// with delimiters and continuation tokens, clipped ranges, version-pinned
// reads), plus fault injection and request counters. It is the fake that
// unit tests of retry, readahead, filecache and fs run against.
//
// It must never behave more kindly than a real store: a pinned read of a
// changed object fails, a missing object is ErrNotFound, a cancelled
// context is ErrCanceled, and injected faults surface exactly as returned.
package mem

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"ferry/bucket"
)

var (
	_ bucket.Bucket = (*Bucket)(nil)
	_ bucket.Writer = (*Bucket)(nil)
)

// DefaultMaxResults is the page size when ListRequest.MaxResults is 0, and
// the cap on larger requests (as on GCS and S3).
const DefaultMaxResults = 1000

// MaxNameLen is the longest object name accepted by Put (GCS and S3 limit).
const MaxNameLen = 1024

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrInjectedReset is a ready-made mid-body failure for Faults.ReadBody:
// retryable, and an unexpected EOF like a real connection reset.
var ErrInjectedReset = fmt.Errorf("mem: injected connection reset: %w: %w", bucket.ErrUnavailable, io.ErrUnexpectedEOF)

// Faults injects failures and latency. Every field is optional; a nil
// field never fails. A fault function may block (honouring ctx) to inject
// latency. Functions are called without the bucket's lock held and may run
// concurrently, so they must be safe for concurrent use.
type Faults struct {
	// Stat, when it returns an error, fails the Stat call with it (after
	// the request was counted).
	Stat func(ctx context.Context, req *bucket.StatRequest) error
	// List fails the List call.
	List func(ctx context.Context, req *bucket.ListRequest) error
	// Read fails NewRangeReader at open, before the object is looked up.
	Read func(ctx context.Context, req *bucket.ReadRequest) error
	// ReadBody is consulted once per successfully opened reader. If it
	// returns a non-nil err, the body yields at most failAfter bytes of the
	// range and then err from Read, like a connection reset mid-body
	// (ErrInjectedReset models exactly that).
	ReadBody func(req *bucket.ReadRequest) (failAfter int64, err error)
	// ReadChunk is called before every Read of a body with the offset
	// (within the range) about to be read; an error ends the body with it,
	// and blocking in it slows the body down.
	ReadChunk func(ctx context.Context, req *bucket.ReadRequest, off int64) error
	// Put and Delete fail the Writer calls.
	Put    func(ctx context.Context, req *bucket.PutRequest) error
	Delete func(ctx context.Context, name string) error
}

// Stats counts requests that reached the bucket, including those that
// failed (by fault, cancellation or a missing object).
type Stats struct {
	Stats, Lists, Reads, Puts, Deletes int64
	// BytesRead is the number of body bytes handed to readers' callers.
	BytesRead int64
}

// Bucket is an in-memory store. The zero value is not usable; call New.
type Bucket struct {
	// Constant data
	name string

	// Request counters, updated atomically.
	stats, lists, reads, puts, deletes, bytesRead atomic.Int64

	mu sync.Mutex
	// objects maps name to its current version.
	objects map[string]*object // GUARDED_BY(mu)
	// names is every key of objects, sorted.
	// INVARIANT: names is strictly increasing and holds exactly the keys
	// of objects.
	names []string // GUARDED_BY(mu)
	// lastGen is the generation of the most recent Put; generations never
	// repeat, even after a delete, like GCS generations.
	lastGen int64  // GUARDED_BY(mu)
	faults  Faults // GUARDED_BY(mu)
}

// object is one immutable version. Put replaces the pointer, never the
// contents, so open readers keep streaming the version they opened.
type object struct {
	data    []byte
	gen     int64
	updated time.Time
	crc     uint32
}

// New returns an empty bucket; name shows in Name() as "mem://name".
func New(name string) *Bucket {
	return &Bucket{name: name, objects: map[string]*object{}}
}

// SetFaults replaces the injected faults; Faults{} removes them.
func (b *Bucket) SetFaults(f Faults) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.faults = f
}

// Stats returns the request counters so far.
func (b *Bucket) Stats() Stats {
	return Stats{
		Stats:     b.stats.Load(),
		Lists:     b.lists.Load(),
		Reads:     b.reads.Load(),
		Puts:      b.puts.Load(),
		Deletes:   b.deletes.Load(),
		BytesRead: b.bytesRead.Load(),
	}
}

// ResetStats zeroes the request counters.
func (b *Bucket) ResetStats() {
	for _, c := range []*atomic.Int64{&b.stats, &b.lists, &b.reads, &b.puts, &b.deletes, &b.bytesRead} {
		c.Store(0)
	}
}

func (b *Bucket) getFaults() Faults {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.faults
}

// checkInvariants panics if the INVARIANT above is broken; tests call it.
func (b *Bucket) checkInvariants() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.names) != len(b.objects) {
		panic(fmt.Sprintf("mem: %d names for %d objects", len(b.names), len(b.objects)))
	}
	for i, n := range b.names {
		if i > 0 && b.names[i-1] >= n {
			panic(fmt.Sprintf("mem: names not strictly increasing at %d: %q, %q", i, b.names[i-1], n))
		}
		if _, ok := b.objects[n]; !ok {
			panic(fmt.Sprintf("mem: name %q has no object", n))
		}
	}
}

// Name implements bucket.Bucket.
func (b *Bucket) Name() string { return "mem://" + b.name }

func (o *object) toObject(name string) *bucket.Object {
	return &bucket.Object{
		Name:      name,
		Size:      uint64(len(o.data)),
		Version:   strconv.FormatInt(o.gen, 10),
		Updated:   o.updated,
		CRC32C:    o.crc,
		HasCRC32C: true,
	}
}

// ctxErr reports a done context as an error matching bucket.ErrCanceled.
func ctxErr(ctx context.Context, op, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mem: %s %q: %w", op, name, bucket.ContextError(ctx, err))
	}
	return nil
}

// faultErr wraps an injected error so that it still matches ErrCanceled
// when the fault function saw the context end.
func faultErr(ctx context.Context, op, name string, err error) error {
	return fmt.Errorf("mem: %s %q: %w", op, name, bucket.ContextError(ctx, err))
}

// Stat implements bucket.Bucket.
func (b *Bucket) Stat(ctx context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
	b.stats.Add(1)
	if err := ctxErr(ctx, "stat", req.Name); err != nil {
		return nil, err
	}
	if f := b.getFaults().Stat; f != nil {
		if err := f(ctx, req); err != nil {
			return nil, faultErr(ctx, "stat", req.Name, err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.objects[req.Name]
	if !ok {
		return nil, fmt.Errorf("mem: stat %q: %w", req.Name, bucket.ErrNotFound)
	}
	return o.toObject(req.Name), nil
}

// List implements bucket.Bucket. The continuation token is the last name
// or prefix returned; the next page starts after it (and after everything
// under it when it was a prefix).
func (b *Bucket) List(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	b.lists.Add(1)
	if err := ctxErr(ctx, "list", req.Prefix); err != nil {
		return nil, err
	}
	if f := b.getFaults().List; f != nil {
		if err := f(ctx, req); err != nil {
			return nil, faultErr(ctx, "list", req.Prefix, err)
		}
	}
	if req.MaxResults < 0 {
		return nil, fmt.Errorf("mem: list %q: MaxResults %d: %w", req.Prefix, req.MaxResults, bucket.ErrInvalid)
	}
	limit := req.MaxResults
	if limit == 0 || limit > DefaultMaxResults {
		limit = DefaultMaxResults
	}
	prefix, delim, token := req.Prefix, req.Delimiter, req.ContinuationToken
	if token != "" && !strings.HasPrefix(token, prefix) {
		return nil, fmt.Errorf("mem: list %q: continuation token %q: %w", prefix, token, bucket.ErrInvalid)
	}
	// A token whose part after the prefix contains the delimiter can only
	// be a common prefix (objects containing it were folded into one).
	tokenIsPrefix := token != "" && delim != "" && strings.Contains(token[len(prefix):], delim)

	b.mu.Lock()
	defer b.mu.Unlock()
	l := &bucket.Listing{Objects: []bucket.Object{}, Prefixes: []string{}}
	i, _ := slices.BinarySearch(b.names, prefix)
	if token != "" {
		j, found := slices.BinarySearch(b.names, token)
		if found {
			j++
		}
		i = max(i, j)
	}
	last := ""
	for ; i < len(b.names); i++ {
		n := b.names[i]
		if !strings.HasPrefix(n, prefix) {
			break
		}
		if tokenIsPrefix && strings.HasPrefix(n, token) {
			continue
		}
		entry, isPrefix := n, false
		if delim != "" {
			if k := strings.Index(n[len(prefix):], delim); k >= 0 {
				entry, isPrefix = n[:len(prefix)+k+len(delim)], true
				if entry == last {
					continue // more names under the prefix just added
				}
			}
		}
		if len(l.Objects)+len(l.Prefixes) == limit {
			l.ContinuationToken = last
			break
		}
		if isPrefix {
			l.Prefixes = append(l.Prefixes, entry)
		} else {
			l.Objects = append(l.Objects, *b.objects[n].toObject(n))
		}
		last = entry
	}
	return l, nil
}

// NewRangeReader implements bucket.Bucket.
func (b *Bucket) NewRangeReader(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	b.reads.Add(1)
	if err := ctxErr(ctx, "read", req.Name); err != nil {
		return nil, err
	}
	if req.Range.Start > req.Range.Limit {
		return nil, fmt.Errorf("mem: read %q %v: %w", req.Name, req.Range, bucket.ErrInvalid)
	}
	faults := b.getFaults()
	if faults.Read != nil {
		if err := faults.Read(ctx, req); err != nil {
			return nil, faultErr(ctx, "read", req.Name, err)
		}
	}
	b.mu.Lock()
	o, ok := b.objects[req.Name]
	b.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("mem: read %q: %w", req.Name, bucket.ErrNotFound)
	}
	if v := strconv.FormatInt(o.gen, 10); req.Version != "" && req.Version != v {
		return nil, fmt.Errorf("mem: read %q: version %s is now %s: %w", req.Name, req.Version, v, bucket.ErrPrecondition)
	}
	r := req.Range.Clip(uint64(len(o.data)))
	rd := &reader{
		ctx:       ctx,
		b:         b,
		req:       *req,
		data:      o.data[r.Start:r.Limit],
		failAfter: -1,
		chunk:     faults.ReadChunk,
	}
	if faults.ReadBody != nil {
		if n, err := faults.ReadBody(req); err != nil {
			rd.failAfter, rd.failErr = max(n, 0), err
		}
	}
	return rd, nil
}

// reader streams one clipped range of one immutable version. It is used by
// one goroutine at a time, as io.Reader requires.
type reader struct {
	ctx  context.Context
	b    *Bucket
	req  bucket.ReadRequest
	data []byte
	off  int64
	// failAfter >= 0: after that many bytes, Read returns failErr.
	failAfter int64
	failErr   error
	chunk     func(ctx context.Context, req *bucket.ReadRequest, off int64) error
	closed    bool
}

func (r *reader) Read(p []byte) (int, error) {
	if r.closed {
		return 0, fmt.Errorf("mem: read %q: %w", r.req.Name, bucket.ErrInvalid)
	}
	if err := ctxErr(r.ctx, "read", r.req.Name); err != nil {
		return 0, err
	}
	if r.chunk != nil {
		if err := r.chunk(r.ctx, &r.req, r.off); err != nil {
			return 0, faultErr(r.ctx, "read", r.req.Name, err)
		}
	}
	end := int64(len(r.data))
	if r.failAfter >= 0 && r.failAfter < end {
		end = r.failAfter
	}
	if r.off >= end {
		if end < int64(len(r.data)) {
			return 0, faultErr(r.ctx, "read", r.req.Name, r.failErr)
		}
		return 0, io.EOF
	}
	n := copy(p, r.data[r.off:end])
	r.off += int64(n)
	r.b.bytesRead.Add(int64(n))
	return n, nil
}

func (r *reader) Close() error {
	r.closed = true
	return nil
}

// Put implements bucket.Writer. Names follow GCS rules: 1 to 1024 bytes of
// valid UTF-8.
func (b *Bucket) Put(ctx context.Context, req *bucket.PutRequest) (*bucket.Object, error) {
	b.puts.Add(1)
	if err := ctxErr(ctx, "put", req.Name); err != nil {
		return nil, err
	}
	if req.Name == "" || len(req.Name) > MaxNameLen || !utf8.ValidString(req.Name) {
		return nil, fmt.Errorf("mem: put %q: bad object name: %w", req.Name, bucket.ErrInvalid)
	}
	if f := b.getFaults().Put; f != nil {
		if err := f(ctx, req); err != nil {
			return nil, faultErr(ctx, "put", req.Name, err)
		}
	}
	o := &object{
		data:    bytes.Clone(req.Data),
		updated: time.Now(),
		crc:     crc32.Checksum(req.Data, castagnoli),
	}
	if o.data == nil {
		o.data = []byte{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastGen++
	o.gen = b.lastGen
	if _, ok := b.objects[req.Name]; !ok {
		i, _ := slices.BinarySearch(b.names, req.Name)
		b.names = slices.Insert(b.names, i, req.Name)
	}
	b.objects[req.Name] = o
	return o.toObject(req.Name), nil
}

// Delete implements bucket.Writer.
func (b *Bucket) Delete(ctx context.Context, name string) error {
	b.deletes.Add(1)
	if err := ctxErr(ctx, "delete", name); err != nil {
		return err
	}
	if f := b.getFaults().Delete; f != nil {
		if err := f(ctx, name); err != nil {
			return faultErr(ctx, "delete", name, err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.objects[name]; !ok {
		return fmt.Errorf("mem: delete %q: %w", name, bucket.ErrNotFound)
	}
	delete(b.objects, name)
	i, _ := slices.BinarySearch(b.names, name)
	b.names = slices.Delete(b.names, i, i+1)
	return nil
}
