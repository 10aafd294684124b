package gcs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"

	"ferry/bucket"
)

// NewRangeReader reads req.Range through the XML API. A pinned read sends
// the generation precondition and, because fake-gcs-server ignores it,
// also checks the generation the response reports before returning.
func (b *Bucket) NewRangeReader(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	if req.Name == "" {
		return nil, fmt.Errorf("gcs: read: empty name: %w", bucket.ErrInvalid)
	}
	if req.Range.Start > req.Range.Limit || req.Range.Start > 1<<62 {
		return nil, fmt.Errorf("gcs: read %q %v: %w", req.Name, req.Range, bucket.ErrInvalid)
	}
	// ReadCompressed: serve the stored bytes, so that sizes and offsets
	// agree with Stat even for objects uploaded with Content-Encoding:
	// gzip (GCS would otherwise decompress them and ignore the range).
	obj := b.bkt.Object(req.Name).ReadCompressed(true)
	var gen int64
	if req.Version != "" {
		g, err := strconv.ParseInt(req.Version, 10, 64)
		if err != nil || g <= 0 {
			return nil, fmt.Errorf("gcs: read %q: version %q is not a generation: %w", req.Name, req.Version, bucket.ErrInvalid)
		}
		gen = g
		obj = obj.If(storage.Conditions{GenerationMatch: gen})
	}

	// The library asks for "everything from offset" when length is
	// negative and sends a HEAD when it is 0; cap huge limits so the
	// int64 conversion stays positive.
	length := req.Range.Len()
	if length > 1<<62 {
		length = 1 << 62
	}
	r, stalled, err := b.open(ctx, obj, int64(req.Range.Start), int64(length))
	if err != nil && stalled.Load() {
		return nil, stallError("read", req.Name, b.readTimeout)
	}
	var gerr *googleapi.Error
	if errors.As(err, &gerr) && gerr.Code == http.StatusRequestedRangeNotSatisfiable {
		// Start is at or past the end (also: any range of an empty
		// object). Nothing to read, but existence and the pin still
		// have to be checked: a body-less request does that.
		r, _, err = b.open(ctx, obj, 0, 0)
		if err != nil {
			return nil, mapError(ctx, "read", req.Name, err)
		}
		if err := checkGeneration(r, req, gen); err != nil {
			return nil, err
		}
		r.Close()
		return &rangeReader{ctx: ctx, name: req.Name}, nil
	}
	if err != nil {
		return nil, mapError(ctx, "read", req.Name, err)
	}
	if err := checkGeneration(r, req, gen); err != nil {
		return nil, err
	}
	if length == 0 {
		r.Close()
		return &rangeReader{ctx: ctx, name: req.Name}, nil
	}

	// The server reports the object's size; clip to it ourselves so that
	// a body that ends early is told apart from the end of the object.
	want := req.Range.Clip(uint64(r.Attrs.Size))
	if r.Attrs.StartOffset != int64(want.Start) {
		r.Close()
		return nil, fmt.Errorf("gcs: read %q %v: server answered from offset %d: %w",
			req.Name, req.Range, r.Attrs.StartOffset, bucket.ErrUnavailable)
	}
	return &rangeReader{ctx: ctx, name: req.Name, r: r, remain: int64(want.Len()),
		stalled: stalled, timeout: b.readTimeout}, nil
}

// open sends one read request. Its context is marked so that
// singleResponseTransport refuses the library's transparent reopen.
// A body that stalls for the read timeout sets the returned flag.
func (b *Bucket) open(ctx context.Context, obj *storage.ObjectHandle, offset, length int64) (*storage.Reader, *atomic.Bool, error) {
	rctx, stalled := watchStalls(context.WithValue(ctx, readerAttemptKey{}, new(atomic.Bool)))
	r, err := obj.NewRangeReader(rctx, offset, length)
	return r, stalled, err
}

// checkGeneration closes r and fails with ErrPrecondition if the response
// is not of the pinned generation. The library reports the response's
// x-goog-generation header as Attrs.Generation (-1 when absent: then the
// pin cannot be verified, which also fails).
func checkGeneration(r *storage.Reader, req *bucket.ReadRequest, gen int64) error {
	if gen == 0 || r.Attrs.Generation == gen {
		return nil
	}
	r.Close()
	return fmt.Errorf("gcs: read %q pinned to generation %d, store has %d: %w",
		req.Name, gen, r.Attrs.Generation, bucket.ErrPrecondition)
}

// rangeReader yields exactly remain bytes, then io.EOF. Not safe for
// concurrent use (nor is any io.Reader).
type rangeReader struct {
	ctx  context.Context
	name string
	r    *storage.Reader // nil for an empty range
	// remain is how many bytes the caller is still owed.
	remain int64
	// err is sticky once set.
	err error
	// stalled is set when the body sent nothing for timeout (see
	// stallTransport); nil for an empty range.
	stalled *atomic.Bool
	timeout time.Duration
}

func (rr *rangeReader) Read(p []byte) (int, error) {
	if rr.err != nil {
		return 0, rr.err
	}
	if rr.remain == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > rr.remain {
		p = p[:rr.remain]
	}
	n, err := rr.r.Read(p)
	rr.remain -= int64(n)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF) && rr.remain == 0:
		err = nil
	case errors.Is(err, io.EOF):
		err = fmt.Errorf("gcs: read %q: body ended %d bytes early: %w: %w",
			rr.name, rr.remain, bucket.ErrUnavailable, io.ErrUnexpectedEOF)
		err = bucket.ContextError(rr.ctx, err)
	case rr.stalled.Load() && rr.ctx.Err() == nil:
		// Our own timeout cancelled the body: retryable, and not the
		// caller's cancellation (which context.Canceled would suggest).
		err = stallError("read", rr.name, rr.timeout)
	default:
		err = mapError(rr.ctx, "read", rr.name, err)
		if !isClassified(err) {
			// Whatever broke a body mid-stream (a CRC mismatch, a
			// malformed chunk) is worth another try.
			err = fmt.Errorf("%w: %w", bucket.ErrUnavailable, err)
		}
	}
	if err != nil {
		rr.err = err
	}
	return n, err
}

func (rr *rangeReader) Close() error {
	if rr.r == nil {
		return nil
	}
	return rr.r.Close()
}
