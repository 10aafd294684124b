package filecache

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// putCounter counts what commits put in the index.
type putCounter struct{ puts, bytes int }

func (c *putCounter) hook(k, v []byte) { c.puts++; c.bytes += len(k) + len(v) }
func (c *putCounter) reset()           { *c = putCounter{} }

// A commit after one block was written to a cached object writes the
// header or one chunk, whatever the object's size: a 64 GiB object (1M
// blocks, 4 MiB of CRCs) costs what a 64 MiB one does.
func TestCommitWritesOnlyDirtyChunks(t *testing.T) {
	const bs = 64 << 10
	got := map[uint64][2]int{} // index bytes: creation, one more block
	for _, size := range []uint64{64 << 20, 64 << 30} {
		var pc putCounter
		s := openT(t, Config{Dir: t.TempDir(), BlockSize: bs, MaxSize: 1 << 30}, hooks{indexPut: pc.hook})
		o := obj("huge", size)
		mid := int64(size/bs) / 2
		require.Equal(t, 1, s.WriteBlocks(o, mid, blockData(o, mid, bs)))
		require.NoError(t, s.flush())
		created := pc.bytes
		pc.reset()
		require.Equal(t, 1, s.WriteBlocks(o, mid+1, blockData(o, mid+1, bs)))
		require.NoError(t, s.flush())
		// One chunk (13-byte key, 32+1024+4 bytes) and the access time
		// with the size (9-byte key, atimeLen+4).
		assert.Equal(t, 2, pc.puts, "size %d", size)
		assert.LessOrEqual(t, pc.bytes, 13+chunkLen(2*chunkBlocks, 1)+4+9+atimeLen+4, "size %d", size)
		// The header with chunk 0, the written block's chunk, the
		// access time: the size's varint is all that grows.
		assert.LessOrEqual(t, created, 2*(13+chunkLen(2*chunkBlocks, 1)+4)+9+atimeLen+4+32, "size %d", size)
		got[size] = [2]int{created, pc.bytes}
		s.checkInvariants(t)
	}
	assert.InDelta(t, got[64<<20][0], got[64<<30][0], 8, "creation")
	assert.Equal(t, got[64<<20][1], got[64<<30][1], "one more block")
}

// indexRows lists the keys of the rows tagged tag in the index of dir
// (store closed), in order.
func indexRows(t *testing.T, dir string, tag byte) []string {
	db, err := bolt.Open(filepath.Join(dir, "v1", "index.db"), 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	var keys []string
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(rowsBucket).ForEach(func(k, _ []byte) error {
			if _, tg, ok := rowOf(k); ok && tg == tag {
				keys = append(keys, string(k))
			}
			return nil
		})
	}))
	return keys
}

// entryRow is the row of the entry key in the index of dir (store
// closed), or 0 if it has none.
func entryRow(t *testing.T, dir, key string) uint64 {
	db, err := bolt.Open(filepath.Join(dir, "v1", "index.db"), 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	var row uint64
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(rowsBucket).ForEach(func(k, v []byte) error {
			if r, ok := decodeAtime(k, v); ok && r.key.String() == key {
				row = r.row
			}
			return nil
		})
	}))
	return row
}

// editIndex runs fn on the index of dir (store closed).
func editIndex(t *testing.T, dir string, fn func(tx *bolt.Tx) error) {
	db, err := bolt.Open(filepath.Join(dir, "v1", "index.db"), 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(fn))
	require.NoError(t, db.Close())
}

// chunkedObj is an object of 4 chunks at testBS, with blocks 0-1 (chunk
// 0), 256-257 (1), 512-513 (2) and 768-769 (3) written.
func chunkedObj(t *testing.T, s *Store, name string) Key {
	o := obj(name, 4*chunkBlocks*testBS)
	for c := int64(0); c < 4; c++ {
		require.Equal(t, 2, s.WriteBlocks(o, c*chunkBlocks, blocksData(o, c*chunkBlocks, 2, testBS)))
	}
	return o
}

// A damaged or missing chunk loses its blocks and nothing else; chunks of
// no entry are deleted at open.
func TestDamagedChunkLosesOnlyItsBlocks(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir}, hooks{})
	o := chunkedObj(t, s, "a")
	key := s.keyFor(o)
	require.NoError(t, s.Close())
	require.Len(t, indexRows(t, dir, tagChunk), 3, "chunks 1-3; chunk 0 is in the header")
	row := entryRow(t, dir, key)
	require.NotZero(t, row)

	const ghost = 1 << 40 // no entry's row
	editIndex(t, dir, func(tx *bolt.Tx) error {
		cb := tx.Bucket(rowsBucket)
		k1 := chunkKey(row, 1)
		v := append([]byte(nil), cb.Get(k1)...)
		v[len(v)-9] ^= 0x40 // a CRC of chunk 1 changed: its seal fails
		require.NoError(t, cb.Put(k1, v))
		require.NoError(t, cb.Delete(chunkKey(row, 2)))
		require.NoError(t, cb.Put(chunkKey(row, 9), seal(chunkKey(row, 9), []byte{1})))
		return cb.Put(chunkKey(ghost, 1), []byte("stray"))
	})
	require.NoError(t, os.Remove(filepath.Join(dir, "v1", snapshotName))) // as after a crash: Open scans

	s = openT(t, Config{Dir: dir}, hooks{})
	for c, want := range []bool{true, false, false, true} {
		for b := int64(0); b < 2; b++ {
			assert.Equal(t, want, readOK(t, s, o, int64(c)*chunkBlocks+b), "chunk %d block %d", c, b)
		}
	}
	assert.Zero(t, s.Stats().CorruptBlocks, "nothing wrong was read: the damaged chunk was dropped whole")
	s.checkInvariants(t)
	require.NoError(t, s.Close())
	assert.Equal(t, []string{string(chunkKey(row, 3))}, indexRows(t, dir, tagChunk),
		"the damaged, stray and out-of-range chunks are deleted")
}

// An index of records written before chunks (record format 1, in an index
// of format 1) keeps its cached blocks and is written again chunked by the
// first commit.
func TestRecordFormat1Migrates(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir}, hooks{})
	big := chunkedObj(t, s, "big")
	small := obj("small", 3*testBS)
	require.Equal(t, 3, s.WriteBlocks(small, 0, blocksData(small, 0, 3, testBS)))
	s.mu.Lock()
	var v1 = map[string][]byte{}
	for k, e := range s.entries {
		v1[k] = encodeRecordV1(&record{format: recordV1, name: e.obj.Name, version: e.obj.Version, size: e.obj.Size,
			blockSize: s.blockSize, bytes: e.bytes, present: e.present, crcs: e.crcs})
	}
	s.mu.Unlock()
	require.NoError(t, s.Close())
	toIndexFormat1(t, dir)
	editIndex(t, dir, func(tx *bolt.Tx) error {
		for k, v := range v1 {
			require.NoError(t, tx.Bucket(v1Entries).Put([]byte(k), v))
		}
		return tx.DeleteBucket(v1Chunks) // as an older ferry left it
	})

	for round := 0; round < 2; round++ {
		s = openT(t, Config{Dir: dir}, hooks{})
		for c := int64(0); c < 4; c++ {
			for b := int64(0); b < 2; b++ {
				assert.True(t, readOK(t, s, big, c*chunkBlocks+b), "round %d chunk %d block %d", round, c, b)
			}
		}
		for b := int64(0); b < 3; b++ {
			assert.True(t, readOK(t, s, small, b), "round %d", round)
		}
		s.checkInvariants(t)
		require.NoError(t, s.Close())
		assert.Len(t, indexRows(t, dir, tagChunk), 3, "round %d: big's chunks 1-3 written", round)
		editIndex(t, dir, func(tx *bolt.Tx) error {
			return tx.Bucket(rowsBucket).ForEach(func(k, v []byte) error {
				if _, tag, _ := rowOf(k); tag == tagEntry {
					assert.EqualValues(t, recordV2, v[0], "round %d: %x written in format 2", round, k)
				}
				return nil
			})
		})
	}
}

// Evicting an entry deletes its chunks with it.
func TestEvictionDeletesChunks(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir}, hooks{})
	chunkedObj(t, s, "a")
	chunkedObj(t, s, "b")
	require.NoError(t, s.flush())
	n, _ := s.Drop(func(name string) bool { return name == "a" })
	require.Equal(t, 1, n)
	b := s.keyFor(obj("b", 4*chunkBlocks*testBS))
	require.NoError(t, s.Close())
	keys := indexRows(t, dir, tagChunk)
	require.Len(t, keys, 3)
	row := entryRow(t, dir, b)
	for _, k := range keys {
		r, _, _ := rowOf([]byte(k))
		assert.Equal(t, row, r, "only b's chunks are left")
	}
}

// A data file deleted behind the store's back is created again empty: the
// chunks the index held for the old one go with it, or they would claim
// blocks the new file does not have.
func TestRecreatedFileDropsItsChunks(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir}, hooks{maxOpen: 1})
	a := chunkedObj(t, s, "a")
	b := obj("b", testBS)
	require.Equal(t, 1, s.WriteBlocks(b, 0, blockData(b, 0, testBS))) // closes a's file (maxOpen 1)
	require.NoError(t, s.flush())
	require.NoError(t, os.Remove(s.pathFor(s.keyFor(a))))

	last := int64(3*chunkBlocks + 5)
	require.Equal(t, 1, s.WriteBlocks(a, last, blockData(a, last, testBS)))
	require.NoError(t, s.Close())
	assert.Equal(t, []string{string(chunkKey(entryRow(t, dir, s.keyFor(a)), 3))}, indexRows(t, dir, tagChunk))

	s = openT(t, Config{Dir: dir}, hooks{})
	for c := int64(0); c < 4; c++ {
		assert.False(t, readOK(t, s, a, c*chunkBlocks), "chunk %d: from the old file", c)
	}
	assert.True(t, readOK(t, s, a, last), "written to the new file")
	assert.Zero(t, s.Stats().CorruptBlocks)
	s.checkInvariants(t)
}

// TestDeleteChunksTakesOnlyTheEntrys: deleting an entry's chunks leaves
// its other rows and the next entry's rows; deleting its rows leaves the
// next entry's.
func TestDeleteChunksTakesOnlyTheEntrys(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "index"), 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(rowsBucket)
		if err != nil {
			return err
		}
		for _, row := range []uint64{7, 8, 7 << 8} {
			for _, k := range [][]byte{rowKey(row, tagAtime), rowKey(row, tagEntry), chunkKey(row, 1), chunkKey(row, 2)} {
				require.NoError(t, b.Put(k, []byte("v")))
			}
		}
		count := func() (n int) {
			require.NoError(t, b.ForEach(func(_, _ []byte) error { n++; return nil }))
			return n
		}
		require.NoError(t, deleteChunks(b, 7))
		assert.Nil(t, b.Get(chunkKey(7, 1)))
		assert.NotNil(t, b.Get(rowKey(7, tagEntry)), "the entry's record stays")
		assert.Equal(t, 10, count())
		require.NoError(t, deleteEntryRows(b, 7))
		assert.Equal(t, 8, count(), "rows 8 and 1792 are left whole")
		assert.NotNil(t, b.Get(chunkKey(7<<8, 2)))
		return nil
	}))
}
