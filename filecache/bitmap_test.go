package filecache

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBitmap(t *testing.T) {
	tests := []struct {
		name  string
		start string // drawing of the initial state
		set   []int64
		clear []int64
		want  string
	}{
		{"empty", "........", nil, nil, "........"},
		{"set two", "........", []int64{2, 3}, nil, "..XX...."},
		{"set and clear", "..XX....", []int64{6}, []int64{3}, "..X...X."},
		{"clear absent is a no-op", "X.......", nil, []int64{1}, "X......."},
		{"set twice", "........", []int64{7, 7}, nil, ".......X"},
		{"word boundary", "...............................................................X.", []int64{64}, []int64{63}, "................................................................X"},
		{"last of three words", "", []int64{129}, nil, "" + repeat('.', 129) + "X"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := int64(len(tc.want))
			b := parseBitmap(tc.start)
			if tc.start == "" {
				b = newBitmap(n)
			}
			for _, i := range tc.set {
				b.set(i)
			}
			for _, i := range tc.clear {
				b.clear(i)
			}
			assert.Equal(t, tc.want, b.draw(n))
			var want int64
			for _, c := range tc.want {
				if c == 'X' {
					want++
				}
			}
			assert.Equal(t, want, b.count())
			assert.Len(t, b, int((n+63)/64))
		})
	}
}

func TestBitmapAllSet(t *testing.T) {
	b := parseBitmap("..XXX.X.")
	assert.True(t, b.allSet(2, 5))  // ..XXX...
	assert.False(t, b.allSet(2, 6)) // ..XXX?..
	assert.True(t, b.allSet(6, 7))  // ......X.
	assert.True(t, b.allSet(3, 3))  // empty range
	assert.False(t, b.allSet(0, 1))
}

func repeat(c byte, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return string(b)
}

func TestRecordRoundTrip(t *testing.T) {
	r := &record{format: recordV2, name: "a/b", version: "17", size: 3*4096 + 5, blockSize: 4096,
		present: parseBitmap("X..X"), crcs: []uint32{1, 0, 0, 4}}
	key := []byte(strings.Repeat("k", 64))
	v := seal(key, encodeHeader(r))
	got, err := decodeRecord(key, v)
	assert.NoError(t, err)
	assert.Equal(t, r, got)

	other := []byte(strings.Repeat("j", 64))
	flipped := append([]byte{}, v...)
	flipped[3] ^= 1
	for _, bad := range [][]byte{nil, {9}, v[:len(v)-1], append(append([]byte{}, v...), 0), flipped} {
		_, err := decodeRecord(key, bad)
		assert.ErrorIs(t, err, errBadRecord)
	}
	_, err = decodeRecord(other, v)
	assert.ErrorIs(t, err, errBadRecord, "a record under another key")

	r.present = parseBitmap("X..X....X") // a bit past the object's 4 blocks
	r.present = r.present[:1]
	_, err = decodeRecord(key, seal(key, encodeHeader(r)))
	assert.ErrorIs(t, err, errBadRecord)
}

func TestRecordV1StillRead(t *testing.T) {
	r := &record{format: recordV1, name: "a/b", version: "17", size: 3*4096 + 5, blockSize: 4096, bytes: 8192,
		present: parseBitmap("X..X"), crcs: []uint32{1, 0, 0, 4}}
	got, err := decodeRecord(nil, encodeRecordV1(r))
	assert.NoError(t, err)
	assert.Equal(t, r, got)
	v := encodeRecordV1(r)
	_, err = decodeRecord(nil, v[:len(v)-1])
	assert.ErrorIs(t, err, errBadRecord)
}
