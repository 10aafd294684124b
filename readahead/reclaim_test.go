package readahead

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Sequential readers whose readahead the budget cannot hold all at once:
// readahead must not make room by dropping parts that their readers come
// to before the part it wants. Each such part would be read back from the
// cache (the disk) a moment later instead of from memory; on the bench's
// 4-stream cold read that was 40% of the bytes.
func TestReadaheadKeepsPartsReadBeforeItsOwn(t *testing.T) {
	b := newFakeBucket()
	c := newMemCache(64 * KiB)
	f, err := New(Config{Bucket: b, Cache: c, MemoryLimit: 16 * MiB, PartSize: 1 * MiB, StartWindow: 8 * MiB, MaxWindow: 8 * MiB})
	require.NoError(t, err)
	defer f.Close()
	// On a loaded machine a stream can wait a second between reads; its
	// parts would then go as an idle stream's, which is not what this
	// tests.
	f.idleAfter = time.Hour
	const size, chunk = 48 * MiB, 256 * KiB
	var hs []*Handle
	for i := range 4 {
		h := f.open(b.put(fmt.Sprintf("obj-%d", i), size))
		defer h.Close()
		hs = append(hs, h)
	}
	for off := int64(0); off < size; off += chunk {
		for _, h := range hs {
			readCheck(t, b, h, off, chunk)
		}
	}
	st := f.Stats()
	t.Logf("read back from the cache: %d of %d MiB; readahead dropped %d times, parts evicted %d", st.CacheHitBytes>>20, st.BytesRead>>20, st.SpeculativeDropped, st.Evicted)
	// Only a demand read waiting for memory may drop a part its reader
	// then reads back from the cache.
	assert.LessOrEqual(t, st.CacheHitBytes, st.Evicted*f.cfg.PartSize, "bytes read back from the cache")
	assert.Equal(t, int64(4*size), st.BytesFetched, "each byte fetched once")
}

// Which kept part goes when memory is short: readahead takes only parts
// that cost little to lose (here: of an idle stream); a demand read takes
// the stored part its reader comes to last, then the least recently used.
func TestVictimOrder(t *testing.T) {
	b := newFakeBucket()
	f, err := New(Config{Bucket: b, Cache: newMemCache(64 * KiB), MemoryLimit: 16 * MiB, PartSize: 1 * MiB})
	require.NoError(t, err)
	defer f.Close()
	h := f.open(b.put("obj", 64*MiB))
	defer h.Close()
	now := time.Now().UnixNano()
	active, idle := &stream{}, &stream{}
	active.cursor.Store(8 * MiB)
	active.lastRead.Store(now)
	idle.cursor.Store(0)
	idle.lastRead.Store(now - int64(2*idleStream))
	kept := func(s *stream, start int64, stored bool, refs int) *part {
		p := &part{key: h.key, obj: &h.obj, start: start, end: start + MiB, owner: h, stream: s, stored: stored, refs: refs, keep: true}
		p.elem = f.resident.PushBack(p)
		return p
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	unstored := kept(active, 9*MiB, false, 1)
	near := kept(active, 10*MiB, true, 1)
	far := kept(active, 30*MiB, true, 1)
	kept(active, 40*MiB, true, 2) // being read
	old := kept(idle, 20*MiB, true, 1)

	assert.Same(t, old, f.victimLocked(false, false), "readahead: the idle stream's part")
	assert.Same(t, old, f.victimLocked(true, false), "demand: the idle stream's part first")
	f.dropLocked(old)
	assert.Nil(t, f.victimLocked(false, false), "readahead takes nothing a reader is coming to")
	assert.Same(t, far, f.victimLocked(true, false), "demand: the stored part read last")
	f.dropLocked(far)
	assert.Same(t, near, f.victimLocked(true, false))
	f.dropLocked(near)
	assert.Same(t, unstored, f.victimLocked(true, false), "demand: then the least recently used")
	f.dropLocked(unstored)
	assert.Nil(t, f.victimLocked(true, false), "a part being read is never taken")
}
