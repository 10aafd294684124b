// Package ranges holds ByteRange, the half-open range [Start, Limit) of an
// object's bytes, for every layer that passes ranges to another: what a
// store is asked to read (bucket.ReadRequest), what the disk cache says
// stands between a file and passthrough (filecache.Store.Unready). It is a
// leaf: it must never import another ferry package, so that any layer can
// use it without depending on another layer.
package ranges

import "fmt"

// ByteRange is the half-open range [Start, Limit) of an object's bytes.
// INVARIANT: Start <= Limit.
type ByteRange struct {
	Start, Limit uint64
}

// Len is the number of bytes in the range.
func (r ByteRange) Len() uint64 {
	if r.Limit < r.Start {
		return 0
	}
	return r.Limit - r.Start
}

// Clip returns r limited to an object of the given size.
func (r ByteRange) Clip(size uint64) ByteRange {
	if r.Limit > size {
		r.Limit = size
	}
	if r.Start > r.Limit {
		r.Start = r.Limit
	}
	return r
}

func (r ByteRange) String() string {
	return fmt.Sprintf("[%d, %d)", r.Start, r.Limit)
}
