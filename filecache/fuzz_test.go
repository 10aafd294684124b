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
// bitmap invariant, has chunk 0 at most (format 2), and survives an
// encode/decode round trip unchanged (the input itself may use
// non-minimal varints).
func FuzzDecodeRecord(f *testing.F) {
	key := []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	f.Add(encodeRecordV1(&record{format: recordV1, name: "a/b", version: "1", size: 3 * 4096, blockSize: 4096, bytes: 8192,
		present: parseBitmap("X.X"), crcs: []uint32{1, 0, 3}}))
	f.Add(encodeRecordV1(&record{format: recordV1, name: "", version: "", size: 0, blockSize: 64 << 10, present: newBitmap(0)}))
	f.Add([]byte{recordV1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add(seal(key, encodeHeader(&record{name: "a/b", version: "1", size: 3 * 4096, blockSize: 4096,
		present: parseBitmap("X.X"), crcs: []uint32{1, 0, 3}})))
	f.Add(seal(key, encodeHeader(&record{name: "big", version: "1", size: 300 * 4096, blockSize: 4096,
		present: newBitmap(300), crcs: make([]uint32, 300)})))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := decodeRecord(key, v)
		if err != nil {
			return
		}
		n := numBlocks(r.size, r.blockSize)
		require.Len(t, r.crcs, int(n))
		require.LessOrEqual(t, r.present.count(), n, "bits beyond the last block")
		var enc []byte
		if r.format == recordV1 {
			enc = encodeRecordV1(r)
		} else {
			_, limit := chunkSpan(n, 0)
			require.Equal(t, r.present.count(), r.present.countRange(0, limit), "blocks past chunk 0 from a header")
			enc = seal(key, encodeHeader(r))
		}
		r2, err := decodeRecord(key, enc)
		require.NoError(t, err)
		require.Equal(t, r, r2, "encode/decode round trip")
	})
}

// FuzzReadChunk feeds arbitrary bytes to the chunk decoder: it never
// panics, changes nothing when it refuses, and what it accepts keeps the
// bitmap invariant and encodes back to the same bytes.
func FuzzReadChunk(f *testing.F) {
	f.Add(int64(300), int64(1), make([]byte, chunkLen(300, 1)))
	f.Add(int64(256), int64(0), make([]byte, chunkLen(256, 0)))
	f.Add(int64(1000), int64(3), bytes.Repeat([]byte{0xff}, chunkLen(1000, 3)))
	f.Fuzz(func(t *testing.T, n, c int64, v []byte) {
		n, c = n&0xfff, c&0xf
		if c >= numChunks(n) {
			return
		}
		present, crcs := newBitmap(n), make([]uint32, n)
		if !readChunk(v, present, crcs, n, c) {
			require.Zero(t, present.count(), "a refused chunk changed the bitmap")
			return
		}
		first, limit := chunkSpan(n, c)
		require.Equal(t, present.count(), present.countRange(first, limit))
		require.Equal(t, v, appendChunk(nil, present, crcs, n, c))
	})
}
