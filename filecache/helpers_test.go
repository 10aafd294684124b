package filecache

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testBS = 4096

func obj(name string, size uint64) Key {
	return Key{Name: name, Size: size, Version: "v1"}
}

// blockData is the deterministic content of block idx of o.
func blockData(o Key, idx, bs int64) []byte {
	n := min(bs, int64(o.Size)-idx*bs)
	h := fnv.New64a()
	h.Write([]byte(o.Name + "\x00" + o.Version))
	r := rand.New(rand.NewPCG(h.Sum64(), uint64(idx)))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// blocksData is blocks [first, first+count) of o, clipped to its end.
func blocksData(o Key, first, count, bs int64) []byte {
	var p []byte
	for i := first; i < first+count && i*bs < int64(o.Size); i++ {
		p = append(p, blockData(o, i, bs)...)
	}
	return p
}

// ReadBlock is ReadBlocks for one block.
func (s *Store) ReadBlock(obj Key, idx int64, p []byte) bool {
	var ok [1]bool
	return s.ReadBlocks(obj, idx, p, ok[:]) == 1
}

// WriteBlocks is WriteBlocksCRC with every CRC computed by the store.
func (s *Store) WriteBlocks(obj Key, first int64, p []byte) int {
	return s.WriteBlocksCRC(obj, first, p, nil)
}

// readOK reads block idx and, if the store says it has it, checks the
// bytes. Returns whether it was a hit.
func readOK(t *testing.T, s *Store, o Key, idx int64) bool {
	t.Helper()
	want := blockData(o, idx, s.BlockSize())
	p := make([]byte, len(want))
	if !s.ReadBlock(o, idx, p) {
		return false
	}
	require.Equal(t, want, p, "ReadBlock(%s, %d) returned wrong bytes", o.Name, idx)
	return true
}

// recorder is a slog handler that keeps records, to check what is logged.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec.Level >= slog.LevelError {
		r.msgs = append(r.msgs, rec.Message)
	}
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }
func (r *recorder) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

// testConfig fills in the tests' defaults: test blocks, a 64 MiB cap,
// one bucket.
func testConfig(cfg Config) Config {
	if cfg.BlockSize == 0 {
		cfg.BlockSize = testBS
	}
	if cfg.MaxSize == 0 {
		cfg.MaxSize = 64 << 20
	}
	if cfg.BucketID == "" {
		cfg.BucketID = "mem://test"
	}
	return cfg
}

func openT(t *testing.T, cfg Config, h hooks) *Store {
	t.Helper()
	s, err := open(testConfig(cfg), h)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	s.checkInvariants(t)
	return s
}

// checkInvariants verifies the store's INVARIANTs and that every block
// the bitmap claims matches its CRC on disk. Call it when no operation
// is in flight.
func (s *Store) checkInvariants(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	held := false
	for _, e := range s.entries {
		held = held || e.holds > 0
	}
	// Evicted entries are not in entries: with no hold on a live one,
	// none may be held (the tests release theirs before checking).
	if !held {
		assert.Zero(t, s.heldEvicted, "heldEvicted with no file held")
	}
	assert.GreaterOrEqual(t, s.heldEvicted, int64(0))
	var sum int64
	var live []*entry
	assert.Equal(t, len(s.entries), s.lru.Len(), "entries vs lru")
	own := 0
	for _, e := range s.entries {
		if e.own {
			own++
		}
	}
	assert.Equal(t, own, len(s.byObj), "byObj holds exactly our entries")
	for el := s.lru.Front(); el != nil; el = el.Next() {
		e := el.Value.(*entry)
		assert.True(t, e.live)
		assert.Same(t, e, s.entries[e.key])
		if e.own {
			assert.Same(t, e, s.byObj[e.obj])
		}
		assert.Zero(t, e.pins, "pins with nothing in flight")
		sum += e.bytes
		assert.Len(t, e.crcs, int(e.nblocks))
		assert.Len(t, e.present, int((e.nblocks+63)/64))
		for i := int64(0); i < int64(len(e.present))*64; i++ {
			if i >= e.nblocks {
				assert.False(t, e.present.get(i), "bit past the end")
			} else if !e.present.get(i) {
				assert.Zero(t, e.crcs[i], "crc of an absent block")
			}
		}
		if e.checked != nil {
			assert.NotZero(t, e.checkedStamp, "blocks checked under no stamp")
			assert.Len(t, e.checked, len(e.present))
			for i := int64(0); i < int64(len(e.checked))*64; i++ {
				if e.checked.get(i) {
					assert.True(t, e.present.get(i), "block %d checked but absent", i)
				}
			}
		}
		if e.wantReadCheck || e.readCheck != nil {
			assert.Equal(t, e.nblocks, e.present.count(), "a read check of a file not whole")
		}
		if rc := e.readCheck; rc != nil {
			assert.True(t, e.wantReadCheck, "a read check not asked for")
			assert.Equal(t, rc.n, rc.good.count())
			assert.Less(t, rc.n, e.nblocks, "a read check done but not ended")
		}
		live = append(live, e)
	}
	for el := s.open.Front(); el != nil; el = el.Next() {
		assert.NotNil(t, el.Value.(*entry).file)
	}
	sum += s.checkColdLocked(t)
	assert.LessOrEqual(t, s.open.Len(), s.hooks.maxOpen)
	assert.Equal(t, sum, s.used, "used == sum of entry bytes, warm and cold")
	assert.Equal(t, [2]int64{}, [2]int64{s.reserved, s.reservedEvicted}, "reserved, and of it evicted, with no write in flight")
	for k, d := range s.deleting {
		assert.NotContains(t, s.entries, k)
		assert.True(t, d.unlinked, "nothing pinned, so every evicted file is unlinked")
		assert.False(t, d.committed, "committed and unlinked deletions are done")
	}
	assert.Zero(t, s.pendingFree)
	type blk struct {
		e   *entry
		idx int64
		crc uint32
	}
	var blks []blk
	for _, e := range live {
		for i := int64(0); i < e.nblocks; i++ {
			if e.present.get(i) {
				blks = append(blks, blk{e, i, e.crcs[i]})
			}
		}
	}
	s.mu.Unlock()
	for _, b := range blks {
		f, err := os.Open(s.pathFor(b.e.key))
		if !assert.NoError(t, err) {
			continue
		}
		n := min(s.blockSize, int64(b.e.obj.Size)-b.idx*s.blockSize)
		p := make([]byte, n)
		_, err = f.ReadAt(p, b.idx*s.blockSize)
		f.Close()
		assert.NoError(t, err)
		assert.Equal(t, b.crc, crc32.Checksum(p, castagnoli), "crc of %s block %d", b.e.obj.Name, b.idx)
	}
}

// du is what the data files really occupy.
func du(t *testing.T, dir string) int64 {
	var n int64
	filepath.Walk(filepath.Join(dir, "v1", "data"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	return n
}

// encodeRecordV1 encodes r in format 1, as ferry did before chunks.
func encodeRecordV1(r *record) []byte {
	buf := []byte{recordV1}
	buf = binary.AppendUvarint(buf, uint64(len(r.name)))
	buf = append(buf, r.name...)
	buf = binary.AppendUvarint(buf, uint64(len(r.version)))
	buf = append(buf, r.version...)
	buf = binary.AppendUvarint(buf, r.size)
	buf = binary.AppendUvarint(buf, uint64(r.blockSize))
	buf = binary.AppendUvarint(buf, uint64(r.bytes))
	for _, w := range r.present {
		buf = binary.LittleEndian.AppendUint64(buf, w)
	}
	for _, c := range r.crcs {
		buf = binary.LittleEndian.AppendUint32(buf, c)
	}
	return buf
}

// countRange is how many of blocks [first, limit) are present.
func (b bitmap) countRange(first, limit int64) int64 {
	var n int64
	for i := first; i < limit; i++ {
		if b.get(i) {
			n++
		}
	}
	return n
}

// checkColdLocked checks the cold queue against its index and the warm
// entries, and returns the bytes of its entries. LOCKS_REQUIRED(s.mu)
func (s *Store) checkColdLocked(t *testing.T) (sum int64) {
	t.Helper()
	n := 0
	for sk, i := range s.cold.pos {
		sl := *s.cold.slot(i)
		assert.Equal(t, sk, sl.key.short(), "cold index")
		n++
		sum += s.checkColdSlotLocked(t, sl.key, i)
	}
	for k, i := range s.cold.more {
		assert.Equal(t, k, s.cold.slot(i).key, "cold index of keys sharing a short key")
		assert.Contains(t, s.cold.pos, k.short(), "a key in more only while another holds its short key")
		n++
		sum += s.checkColdSlotLocked(t, k, i)
	}
	live := 0
	rows := map[uint64]bool{} // every entry has a row of its own, below the next
	s.cold.each(func(sl coldSlot) {
		live++
		assert.False(t, rows[sl.row], "row %d taken twice", sl.row)
		assert.True(t, sl.row > 0 && sl.row < s.nextRow, "row %d, next %d", sl.row, s.nextRow)
		rows[sl.row] = true
	})
	assert.Equal(t, live, n, "every queued slot indexed")
	for _, e := range s.entries {
		assert.False(t, rows[e.row], "row %d taken twice", e.row)
		assert.True(t, e.row > 0 && e.row < s.nextRow, "row %d, next %d", e.row, s.nextRow)
		rows[e.row] = true
	}
	return sum
}

// checkColdSlotLocked checks the cold slot i of key k, and returns its
// bytes. LOCKS_REQUIRED(s.mu)
func (s *Store) checkColdSlotLocked(t *testing.T, k coldKey, i int32) int64 {
	t.Helper()
	sl := *s.cold.slot(i)
	assert.GreaterOrEqual(t, sl.bytes, int64(0), "cold slot of a key gone")
	assert.GreaterOrEqual(t, int(i), s.cold.head)
	assert.NotContains(t, s.entries, k.String(), "warm and cold")
	i2, ok := s.cold.find(k)
	assert.True(t, ok && i2 == i, "found where it is")
	return sl.bytes
}

// putLog records the rows commits put in the index (hooks.indexPut)
// until taken.
type putLog struct {
	mu   sync.Mutex
	puts []loggedPut
}

type loggedPut struct {
	key string
	val []byte
}

func (l *putLog) hook(k, v []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.puts = append(l.puts, loggedPut{string(k), bytes.Clone(v)})
}

// take returns the rows put since the last take.
func (l *putLog) take() []loggedPut {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.puts
	l.puts = nil
	return p
}
