package filecache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// toIndexFormat1 writes the index of dir (store closed) again as an
// older ferry kept it (index format 1, convert.go): each kind of row in a
// bucket of its own, keyed by the entry's hex key, sealed under it.
func toIndexFormat1(t *testing.T, dir string) {
	editIndex(t, dir, func(tx *bolt.Tx) error {
		buckets := map[string]*bolt.Bucket{}
		for _, name := range [][]byte{v1Entries, v1Chunks, v1Atime, v1Checked} {
			b, err := tx.CreateBucketIfNotExists(name)
			require.NoError(t, err)
			buckets[string(name)] = b
		}
		keys := map[uint64][]byte{} // row -> hex key
		rb := tx.Bucket(rowsBucket)
		require.NoError(t, rb.ForEach(func(k, v []byte) error {
			row, tag, ok := rowOf(k)
			require.True(t, ok)
			if tag == tagAtime {
				r, ok := decodeAtime(k, v)
				require.True(t, ok)
				keys[row] = []byte(r.key.String())
				var av [16]byte
				binary.LittleEndian.PutUint64(av[:], uint64(r.atime))
				binary.LittleEndian.PutUint64(av[8:], uint64(r.bytes))
				return buckets[string(v1Atime)].Put(keys[row], av[:])
			}
			key := keys[row]
			require.NotNil(t, key, "an entry's atime row comes first")
			body, sealed := unseal(k, v)
			switch tag {
			case tagEntry:
				if v[0] == recordV1 {
					return buckets[string(v1Entries)].Put(key, bytes.Clone(v))
				}
				require.True(t, sealed)
				return buckets[string(v1Entries)].Put(key, seal(key, bytes.Clone(body)))
			case tagChecked:
				require.True(t, sealed)
				return buckets[string(v1Checked)].Put(key, seal(key, bytes.Clone(body)))
			case tagChunk:
				require.True(t, sealed)
				ck := binary.BigEndian.AppendUint32(bytes.Clone(key), binary.BigEndian.Uint32(k[rowPrefixLen+1:]))
				return buckets[string(v1Chunks)].Put(ck, seal(ck, bytes.Clone(body)))
			}
			return nil
		}))
		return tx.DeleteBucket(rowsBucket)
	})
	require.NoError(t, os.Remove(filepath.Join(dir, "v1", snapshotName)))
}

// format1Cache returns a closed cache of one object of 3 blocks, cached
// whole, whose index is of format 1, and the object.
func format1Cache(t *testing.T) (string, Key) {
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir}, hooks{})
	o := obj("a", 3*testBS)
	require.Equal(t, 3, s.WriteBlocks(o, 0, blocksData(o, 0, 3, testBS)))
	require.NoError(t, s.Close())
	toIndexFormat1(t, dir)
	return dir, o
}

// An index of format 1 is converted at Open: every entry keeps its
// blocks, its check and its place in the LRU order, its rows numbered
// least recent first, and the old buckets are gone.
func TestIndexFormat1Converts(t *testing.T) {
	dir := t.TempDir()
	clock := int64(1_000_000_000_000)
	now := func() int64 { clock += 1e9; return clock }
	s := openT(t, Config{Dir: dir}, hooks{now: now})
	big := chunkedObj(t, s, "big")
	var small []Key
	for _, name := range []string{"c", "a", "b"} {
		o := obj(name, 3*testBS)
		require.Equal(t, 3, s.WriteBlocks(o, 0, blocksData(o, 0, 3, testBS)))
		small = append(small, o)
	}
	checked := small[1]
	wf, ok := s.Whole(checked)
	require.True(t, ok)
	require.True(t, wf.Check())
	wf.Release()
	require.NoError(t, s.Close())
	toIndexFormat1(t, dir)

	s = openT(t, Config{Dir: dir}, hooks{now: now})
	assert.EqualValues(t, 4, s.Stats().Entries)
	// Least recent first: big, c and b as written, then a, checked last.
	for i, o := range []Key{big, small[0], small[2], small[1]} {
		require.NoError(t, s.Close())
		assert.EqualValues(t, i+1, entryRow(t, dir, s.keyFor(o)), "%s", o.Name)
		s = openT(t, Config{Dir: dir}, hooks{now: now})
	}
	for c := int64(0); c < 4; c++ {
		assert.True(t, readOK(t, s, big, c*chunkBlocks), "chunk %d", c)
	}
	for _, o := range small {
		for b := int64(0); b < 3; b++ {
			assert.True(t, readOK(t, s, o, b), "%s block %d", o.Name, b)
		}
	}
	wf, ok = s.Whole(checked)
	require.True(t, ok)
	assert.True(t, wf.Checked(), "the check is kept")
	wf.Release()
	assert.Zero(t, s.Stats().CorruptBlocks)
	s.checkInvariants(t)
	require.NoError(t, s.Close())
	editIndex(t, dir, func(tx *bolt.Tx) error {
		for _, b := range [][]byte{v1Entries, v1Chunks, v1Atime, v1Checked} {
			assert.Nil(t, tx.Bucket(b), "%s", b)
		}
		return nil
	})
}

// A conversion cut short leaves the index as it was, and its file beside
// it is replaced by the next Open's.
func TestIndexConversionCutShort(t *testing.T) {
	dir, o := format1Cache(t)
	half := filepath.Join(dir, "v1", "index.db.convert")
	require.NoError(t, os.WriteFile(half, []byte("a conversion that died"), 0o600))

	s := openT(t, Config{Dir: dir}, hooks{})
	for b := int64(0); b < 3; b++ {
		assert.True(t, readOK(t, s, o, b))
	}
	assert.NoFileExists(t, half)
	s.checkInvariants(t)
}

// BenchmarkConvertIndex: Open of a cache whose index is of format 1,
// largeIndexRows small entries (records, access times, checks), which
// converts it; per entry. Run it with -benchtime 1x.
func BenchmarkConvertIndex(b *testing.B) {
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		s, err := open(testConfig(Config{Dir: dir}), hooks{})
		require.NoError(b, err)
		require.NoError(b, s.Close())
		writeV1EntryRows(b, dir, largeIndexRows)
		b.StartTimer()
		s, err = open(testConfig(Config{Dir: dir, MaxSize: 1 << 40}), hooks{})
		b.StopTimer()
		require.NoError(b, err)
		require.EqualValues(b, largeIndexRows, s.Stats().ColdEntries)
		require.NoError(b, s.Close())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*largeIndexRows), "ns/entry")
}

// writeV1EntryRows writes n one-block entries, checked, into the index in
// dir in format 1, as an older ferry left a large cache of small files.
func writeV1EntryRows(tb testing.TB, dir string, n int) {
	db, err := bolt.Open(filepath.Join(dir, "v1", "index.db"), 0o600, nil)
	require.NoError(tb, err)
	defer db.Close()
	present := newBitmap(1)
	present.set(0)
	keys := make([]string, n)
	for i := range keys {
		var seed [8]byte
		binary.LittleEndian.PutUint64(seed[:], uint64(i))
		keys[i] = coldKey(sha256.Sum256(seed[:])).String()
	}
	slices.Sort(keys) // bbolt appends in order cheaply
	require.NoError(tb, db.Update(func(tx *bolt.Tx) error {
		require.NoError(tb, tx.DeleteBucket(rowsBucket))
		for _, name := range [][]byte{v1Entries, v1Atime, v1Checked, v1Chunks} {
			_, err := tx.CreateBucket(name)
			require.NoError(tb, err)
		}
		return nil
	}))
	for first := 0; first < n; first += 50_000 {
		require.NoError(tb, db.Update(func(tx *bolt.Tx) error {
			for i := first; i < min(n, first+50_000); i++ {
				k := []byte(keys[i])
				var av [16]byte
				binary.LittleEndian.PutUint64(av[:], uint64(i))
				binary.LittleEndian.PutUint64(av[8:], 4096)
				rec := encodeHeader(&record{name: fmt.Sprintf("old%d", i), version: "1", size: testBS,
					blockSize: testBS, present: present, crcs: []uint32{uint32(i)}})
				for _, r := range []struct {
					b, v []byte
				}{
					{v1Atime, av[:]},
					{v1Checked, seal(k, encodeChecked("boot", fileStamp{dev: 1, ino: uint64(i), size: testBS}))},
					{v1Entries, seal(k, rec)},
				} {
					if err := tx.Bucket(r.b).Put(k, r.v); err != nil {
						return err
					}
				}
			}
			return nil
		}))
	}
}

// An old index that the volume has no room to convert is dropped: the
// cache starts empty (its files go as orphans, which makes room) rather
// than fail every start and leave ferry without its disk cache.
func TestIndexConversionWithoutRoom(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("cannot mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	cache := filepath.Join(dir, "cache")
	lie := func(string) (int64, int64, error) { return 1 << 40, 1 << 40, nil }
	s := openT(t, Config{Dir: cache}, hooks{statfs: lie})
	o := obj("a", 3*testBS)
	require.Equal(t, 3, s.WriteBlocks(o, 0, blocksData(o, 0, 3, testBS)))
	require.NoError(t, s.Close())
	toIndexFormat1(t, cache)
	// The rest of the volume taken, as by other files.
	f, err := os.Create(filepath.Join(dir, "filler"))
	require.NoError(t, err)
	for err == nil {
		_, err = f.Write(make([]byte, 64<<10))
	}
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NoError(t, f.Close())

	rec := &recorder{}
	s = openT(t, Config{Dir: cache, Logger: slog.New(rec)}, hooks{statfs: lie})
	assert.Zero(t, s.Stats().Entries)
	assert.False(t, readOK(t, s, o, 0))
	assert.Len(t, rec.errors(), 1, "logged")
	<-s.tidied
	assert.NoFileExists(t, s.pathFor(s.keyFor(o)), "the files go as orphans")
	assert.NoFileExists(t, filepath.Join(cache, "v1", "index.db.convert"))
}

// The start's marker (openIndex) is gone while the index converts: a
// start killed then converts again at the next, rather than take the
// index for one that kills bbolt and move it aside.
func TestIndexConversionNotMarked(t *testing.T) {
	dir, _ := format1Cache(t)
	editIndex(t, dir, func(tx *bolt.Tx) error { // rows without sizes: the conversion asks for them
		ab := tx.Bucket(v1Atime)
		k, v := ab.Cursor().First()
		return ab.Put(bytes.Clone(k), bytes.Clone(v[:8]))
	})
	path := filepath.Join(dir, "v1", "index.db")
	asked := 0
	db, idx, err := openIndex(path, func(string) int64 {
		asked++
		assert.NoFileExists(t, path+".opening")
		return 4096
	}, t.Logf)
	require.NoError(t, err)
	defer db.Close()
	assert.Equal(t, 1, asked)
	assert.Equal(t, 1, idx.converted)
}
