package filecache

import (
	"math/bits"
	"strings"
)

// bitmap records which blocks of one object are present on disk, one bit
// per block, bit i of word i/64.
// INVARIANT: bits at or beyond the object's block count are never set, so
// Count and the encoded form are exact.
type bitmap []uint64

func newBitmap(n int64) bitmap { return make(bitmap, (n+63)/64) }

func (b bitmap) get(i int64) bool { return b[i>>6]&(1<<(uint64(i)&63)) != 0 }
func (b bitmap) set(i int64)      { b[i>>6] |= 1 << (uint64(i) & 63) }
func (b bitmap) clear(i int64)    { b[i>>6] &^= 1 << (uint64(i) & 63) }

// count returns the number of present blocks.
func (b bitmap) count() int64 {
	var n int
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return int64(n)
}

// allSet reports whether every block in [first, limit) is present.
func (b bitmap) allSet(first, limit int64) bool {
	for i := first; i < limit; i++ {
		if !b.get(i) {
			return false
		}
	}
	return true
}

// draw renders the first n bits as ".X" characters, the notation tests
// use to draw expected states (`..XX..X.`).
func (b bitmap) draw(n int64) string {
	var sb strings.Builder
	for i := int64(0); i < n; i++ {
		if b.get(i) {
			sb.WriteByte('X')
		} else {
			sb.WriteByte('.')
		}
	}
	return sb.String()
}

// parseBitmap is draw's inverse, for tests and for reading drawings.
func parseBitmap(s string) bitmap {
	b := newBitmap(int64(len(s)))
	for i, c := range s {
		if c == 'X' {
			b.set(int64(i))
		}
	}
	return b
}
