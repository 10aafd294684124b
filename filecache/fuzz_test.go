package filecache

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzBitmap drives a bitmap with set/clear operations decoded from the
// input and checks it against a []bool after every step: get, count,
// allSet, and the draw/parseBitmap round trip.
func FuzzBitmap(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{63, 0, 1, 62, 130})
	f.Add([]byte{64, 63, 64, 0x80 | 63})
	f.Add([]byte{200, 1, 2, 3, 0x81, 199, 128, 0xff})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 {
			return
		}
		n := int64(ops[0]) + 1 // 1..256 blocks: up to 4 words
		b := newBitmap(n)
		model := make([]bool, n)
		for _, op := range ops[1:] {
			i := int64(op&0x7f) * 2 % n // reaches both halves of a word
			if op&0x80 == 0 {
				b.set(i)
				model[i] = true
			} else {
				b.clear(i)
				model[i] = false
			}
			var want int64
			for j, v := range model {
				require.Equal(t, v, b.get(int64(j)), "block %d", j)
				if v {
					want++
				}
			}
			require.Equal(t, want, b.count())
			require.Equal(t, b, parseBitmap(b.draw(n)), "draw/parse round trip")
			first := i / 2
			all := true
			for j := first; j <= i; j++ {
				all = all && model[j]
			}
			require.Equal(t, all, b.allSet(first, i+1))
		}
	})
}

// FuzzDecodeRecord feeds arbitrary bytes to the index decoder, as a
// damaged index would: it never panics, and whatever it accepts keeps the
// bitmap invariant and survives an encode/decode round trip unchanged
// (the input itself may use non-minimal varints).
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(&record{name: "a/b", version: "1", size: 3 * 4096, blockSize: 4096, bytes: 8192,
		present: parseBitmap("X.X"), crcs: []uint32{1, 0, 3}}))
	f.Add(encodeRecord(&record{name: "", version: "", size: 0, blockSize: 64 << 10, present: newBitmap(0)}))
	f.Add([]byte{entryFormat, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := decodeRecord(v)
		if err != nil {
			return
		}
		n := numBlocks(r.size, r.blockSize)
		require.Len(t, r.crcs, int(n))
		require.LessOrEqual(t, r.present.count(), n, "bits beyond the last block")
		enc := encodeRecord(r)
		r2, err := decodeRecord(enc)
		require.NoError(t, err)
		require.Equal(t, r, r2, "encode/decode round trip")
		require.True(t, bytes.Equal(enc, encodeRecord(r2)))
	})
}
