package readahead

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	KiB = int64(1) << 10
	MiB = int64(1) << 20
)

func newDetector() *detector {
	return &detector{reorder: 4 * MiB, gap: 1 * MiB, max: 4, initial: MiB, parent: context.Background()}
}

func TestDetectorSequential(t *testing.T) {
	d := newDetector()
	base := 50 * MiB
	s, adv, ev := d.observe(base, 128*KiB)
	require.True(t, adv)
	require.Nil(t, ev)
	assert.False(t, s.sequential(), "one read is not a pattern")
	for off := base + 128*KiB; off < base+4*MiB; off += 128 * KiB {
		s2, adv, _ := d.observe(off, 128*KiB)
		require.Same(t, s, s2)
		require.True(t, adv)
		assert.Equal(t, off >= base+256*KiB, s.sequential(), "sequential from the third read on")
	}
	assert.Equal(t, base+4*MiB, s.next)
	assert.Len(t, d.streams, 1)

	// A first read at offset 0 starts a sequential stream at once.
	s0, _, _ := d.observe(0, 128*KiB)
	assert.True(t, s0.sequential())
}

func TestDetectorRandom(t *testing.T) {
	d := newDetector()
	// Offsets far apart (more than reorder+gap): every read a new stream,
	// none sequential; the LRU keeps at most max.
	for i, off := range []int64{900, 100, 500, 300, 700, 200, 800} {
		s, _, ev := d.observe(off*MiB, 512*KiB)
		assert.False(t, s.sequential(), "read %d", i)
		if i >= 4 {
			require.NotNil(t, ev, "read %d must evict the oldest stream", i)
			assert.NoError(t, ev.ctx.Err(), "the detector leaves cancelling to its caller")
		}
	}
	assert.Len(t, d.streams, 4)
}

func TestDetectorReorderedAndGaps(t *testing.T) {
	d := newDetector()
	// Kernel async reads: 0, 256K, 128K, 512K, 384K, ... and a small gap.
	order := []int64{0, 256, 128, 512, 384, 640, 768, 1024 + 512 /* gap of 512K */, 896, 1024}
	var s *stream
	for _, k := range order {
		got, _, ev := d.observe(k*KiB, 128*KiB)
		require.Nil(t, ev)
		if s == nil {
			s = got
		}
		require.Same(t, s, got, "read at %dK must stay in the stream", k)
	}
	assert.True(t, s.sequential())
	assert.Equal(t, (1024+512+128)*KiB, s.next)
	// Far behind (beyond the reorder tolerance) is a new stream.
	got, _, _ := d.observe(0, 4*KiB)
	got2, _, _ := d.observe(100*MiB, 4*KiB)
	assert.NotSame(t, s, got2)
	assert.Same(t, s, got, "0 is within the reorder tolerance of 1.6M")
}

func TestDetectorInterleavedStreams(t *testing.T) {
	d := newDetector()
	starts := []int64{0, 100 * MiB, 200 * MiB}
	streams := make([]*stream, len(starts))
	for round := int64(0); round < 8; round++ {
		for i, st := range starts {
			s, adv, ev := d.observe(st+round*256*KiB, 256*KiB)
			require.Nil(t, ev)
			require.True(t, adv)
			if round == 0 {
				streams[i] = s
			}
			require.Same(t, streams[i], s, "stream %d round %d", i, round)
		}
	}
	for i, s := range streams {
		assert.True(t, s.sequential(), "stream %d", i)
		assert.Equal(t, starts[i]+8*256*KiB, s.next)
	}
	assert.Len(t, d.streams, 3)
}

// TestDetectorRandomRecords: several readers share one handle and read
// back-to-back 512 KiB records in shuffled order (half of them), so some
// records follow others by chance: hardly any read may be taken as
// sequential (each would start readahead nobody reads).
func TestDetectorRandomRecords(t *testing.T) {
	d := &detector{reorder: DefaultReorderTolerance, gap: DefaultGapTolerance, max: DefaultMaxStreams,
		initial: MiB, parent: context.Background()}
	const rec = 512 * KiB
	n := int(256 * MiB / rec)
	order := rand.New(rand.NewPCG(1, 2)).Perm(n)[:n/2]
	seq := 0
	for _, k := range order {
		if s, _, _ := d.observe(int64(k)*rec+12345, rec); s.sequential() {
			seq++
		}
	}
	assert.LessOrEqual(t, seq, len(order)/100, "reads taken as sequential out of %d", len(order))

	// A sequential reader among them still is one.
	var s *stream
	for i := range int64(8) {
		s, _, _ = d.observe(300*MiB+i*MiB, MiB)
		d.observe(int64(order[i])*rec, rec) // a random read in between
	}
	assert.True(t, s.sequential())
}

// TestDetectorJumpIsNoStep: a read past the gap but within the readahead
// frontier joins the stream and moves its cursor, but is no step: random
// reads landing in a prefetched range must not drive readahead. A reader
// that did skip ahead steps again from its new position.
func TestDetectorJumpIsNoStep(t *testing.T) {
	d := newDetector()
	var s *stream
	for off := int64(0); off < 4*MiB; off += MiB {
		s, _, _ = d.observe(off, MiB)
	}
	require.True(t, s.sequential())
	s.frontier = 40 * MiB
	seq := s.seq

	got, step, _ := d.observe(20*MiB, 512*KiB)
	assert.Same(t, s, got)
	assert.False(t, step, "a jump of 16 MiB is no step")
	assert.Equal(t, seq, s.seq)
	assert.Equal(t, 20*MiB+512*KiB, s.next)

	got, step, _ = d.observe(20*MiB+512*KiB, 512*KiB)
	assert.Same(t, s, got)
	assert.True(t, step, "reading on from there is")
	assert.Equal(t, seq+1, s.seq)
}
