// Package bucket is the one interface ferry reads object stores through:
// stat one object, list one level of a prefix, and read a byte range pinned
// to the version seen earlier. It holds only the interface, its value types
// and its errors; backends (gcs, s3, file, mem) and decorators (retry,
// prefix, metrics) live in sub-packages, and package connect stacks them.
//
// It must never return bytes of one object version while claiming another:
// a pinned read of a changed object fails with ErrPrecondition.
package bucket

import (
	"context"
	"io"
	"time"

	"ferry/ranges"
)

// ByteRange is the half-open range [Start, Limit) of an object's bytes
// (package ranges, where other layers find it without importing bucket).
type ByteRange = ranges.ByteRange

// Object is what a store says about one object.
type Object struct {
	// Name is the full object name within the bucket (after any prefix
	// decorator has stripped its prefix).
	Name string
	// Size in bytes.
	Size uint64
	// Version identifies the content: the GCS generation, the S3 ETag, or
	// the file backend's size-mtime-inode. Opaque to callers: compare it
	// for equality and pass it back in ReadRequest.Version, nothing else.
	Version string
	// Updated is the store's modification time.
	Updated time.Time
	// CRC32C (Castagnoli) of the whole object when HasCRC32C is set.
	CRC32C    uint32
	HasCRC32C bool
}

// SameVersion reports whether o and p are the same version of the same
// object. Without versions (Version "") a rewrite of the same size shows
// only in Updated.
func (o *Object) SameVersion(p *Object) bool {
	return o.Name == p.Name && o.Version == p.Version && o.Size == p.Size &&
		(o.Version != "" || o.Updated.Equal(p.Updated))
}

// StatRequest asks about one object.
type StatRequest struct {
	Name string
}

// ListRequest lists the objects and sub-prefixes directly under Prefix.
type ListRequest struct {
	// Prefix every returned name starts with, usually "" or ending in "/".
	Prefix string
	// Delimiter groups names that contain it after Prefix into
	// Listing.Prefixes. "/" for one directory level; "" lists everything
	// under Prefix flat.
	Delimiter string
	// ContinuationToken resumes a listing where the previous page's
	// Listing.ContinuationToken left off; "" starts at the beginning.
	ContinuationToken string
	// MaxResults bounds objects plus prefixes in one page; 0 lets the
	// store choose (typically 1000). A store may return fewer.
	MaxResults int
}

// Listing is one page of a listing.
type Listing struct {
	// Objects in lexical order of name. With a delimiter, an object whose
	// name equals Prefix (a directory marker such as "dir/") is included.
	Objects []Object
	// Prefixes are the distinct sub-prefixes, each ending in the
	// delimiter, in lexical order.
	Prefixes []string
	// ContinuationToken is "" on the last page.
	ContinuationToken string
}

// ReadRequest asks for a byte range of one object version.
type ReadRequest struct {
	Name string
	// Version pins the read to the content seen by Stat or List. If the
	// object has changed since, the read fails with ErrPrecondition, at
	// open or (if the store only reports it later) before any byte of the
	// other version is returned. "" reads whatever is current.
	Version string
	// Range to read. A range that extends past the end of the object is
	// clipped to it; an empty (or fully clipped) range yields no bytes
	// but still checks that the object exists.
	Range ByteRange
}

// Bucket is a read-only view of one object store bucket.
//
// All methods are safe for concurrent use by many goroutines. They honour
// ctx: a cancelled or expired context ends the call with an error that
// matches ErrCanceled. Errors match (errors.Is) one of the sentinels in
// errors.go where one applies: ErrNotFound, ErrPrecondition,
// ErrPermission, ErrUnavailable (worth retrying), ErrCanceled, ErrInvalid.
type Bucket interface {
	// Name describes the bucket for logs and cache keys, e.g.
	// "gs://training-data" or "file:///srv/data". It never contains
	// credentials.
	Name() string

	// Stat returns the object with exactly this name, or ErrNotFound.
	// A name ending in "/" is an ordinary object name (a marker).
	Stat(ctx context.Context, req *StatRequest) (*Object, error)

	// List returns one page of the objects and prefixes under
	// req.Prefix. A prefix with nothing under it is an empty listing,
	// not ErrNotFound.
	List(ctx context.Context, req *ListRequest) (*Listing, error)

	// NewRangeReader opens req.Range of the object. The returned reader
	// yields exactly the clipped range's bytes and then io.EOF; a body
	// that ends early yields io.ErrUnexpectedEOF (wrapped in
	// ErrUnavailable), never a silent short read. The caller must Close
	// it. Missing object: ErrNotFound. Changed object (req.Version set
	// and different): ErrPrecondition.
	NewRangeReader(ctx context.Context, req *ReadRequest) (io.ReadCloser, error)
}

// PutRequest uploads a whole object.
type PutRequest struct {
	Name string
	Data []byte
}

// Writer is implemented by backends that can create and delete objects.
// ferry's mount is read-only and never writes; tests and tools/bench use
// Writer to stage data on a real or emulated store.
type Writer interface {
	// Put creates or replaces the object and returns what Stat would now
	// return for it (in particular its new Version).
	Put(ctx context.Context, req *PutRequest) (*Object, error)
	// Delete removes the object; a missing object is ErrNotFound.
	Delete(ctx context.Context, name string) error
}
