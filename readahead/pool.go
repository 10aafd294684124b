package readahead

import (
	"sync"
	"sync/atomic"
)

// bufPool recycles buffers by size class (multiples of the block size, so
// a part's accounted cost is its real capacity). Buffers come from mapped,
// outside the Go heap; from the heap only where there is no mapped (the
// race detector sees only the heap), for classes not of whole pages (tiny
// test block sizes), or if a mapping fails. Heap buffers are recycled too,
// so that a steady stream of parts does not make the GC balloon the heap.
type bufPool struct {
	blockSize int64
	pools     sync.Map // int64 class -> *sync.Pool
	mapped    *mappedBuffers
	// onHeap counts buffers made on the heap (tests).
	onHeap atomic.Int64
	// room is the memory budget not in use: free mapped buffers are kept
	// within it, so that they and the buffers in use never hold more than
	// the budget together.
	room func() int64
}

// class is the capacity (and budget cost) of a buffer for n bytes.
func (p *bufPool) class(n int64) int64 { return alignUp(n, p.blockSize) }

// get returns a buffer of length n. The caller has accounted class(n).
func (p *bufPool) get(n int64) []byte {
	c := p.class(n)
	if p.mapped != nil && p.room != nil {
		defer p.mapped.keepFree(p.room())
	}
	if p.mapped.fits(c) {
		if b := p.mapped.get(c); b != nil {
			return b[:n]
		}
	}
	if v, ok := p.pools.Load(c); ok {
		if b, ok := v.(*sync.Pool).Get().(*[]byte); ok {
			return (*b)[:n]
		}
	}
	p.onHeap.Add(1)
	return make([]byte, n, c)
}

func (p *bufPool) put(b []byte) {
	if b == nil || p.mapped.put(b) {
		return
	}
	c := int64(cap(b))
	v, _ := p.pools.LoadOrStore(c, &sync.Pool{})
	b = b[:c]
	v.(*sync.Pool).Put(&b)
}

// close returns the mapped buffers' memory (those still in use, when they
// are put back).
func (p *bufPool) close() { p.mapped.close() }
