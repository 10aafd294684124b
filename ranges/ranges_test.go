package ranges

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestByteRange(t *testing.T) {
	for _, tc := range []struct {
		r      ByteRange
		size   uint64
		clip   ByteRange
		length uint64
	}{
		{ByteRange{0, 10}, 100, ByteRange{0, 10}, 10},
		{ByteRange{90, 110}, 100, ByteRange{90, 100}, 20},
		{ByteRange{150, 160}, 100, ByteRange{100, 100}, 10},
		{ByteRange{5, 5}, 100, ByteRange{5, 5}, 0},
		{ByteRange{0, 10}, 0, ByteRange{0, 0}, 10},
	} {
		assert.Equal(t, tc.clip, tc.r.Clip(tc.size), "%v clipped to %d", tc.r, tc.size)
		assert.Equal(t, tc.length, tc.r.Len())
		assert.LessOrEqual(t, tc.r.Clip(tc.size).Limit, tc.size)
	}
	assert.Zero(t, ByteRange{10, 5}.Len(), "an inverted range is empty")
	assert.Equal(t, "[0, 8388608)", ByteRange{0, 8 << 20}.String())
}
