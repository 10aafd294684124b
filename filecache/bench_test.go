package filecache

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// BenchmarkReadBlock measures a cache hit end to end (key hash, lookup,
// pread from the page cache, CRC32C) at the default block size, so the
// per-block overhead can be compared with the raw pread below.
func BenchmarkReadBlock(b *testing.B) {
	const bs, nblocks = DefaultBlockSize, 256 // a 16 MiB object
	s, err := open(Config{Dir: b.TempDir(), BlockSize: bs, MaxSize: 1 << 30, BucketID: "bench"}, hooks{})
	require.NoError(b, err)
	b.Cleanup(func() { s.Close() })
	o := obj("bench/shard-00000.tar", nblocks*bs)
	data := blocksData(o, 0, nblocks, bs)
	require.Equal(b, nblocks, s.WriteBlocks(o, 0, data))

	b.Run("ReadBlock", func(b *testing.B) {
		p := make([]byte, bs)
		b.SetBytes(bs)
		for i := 0; b.Loop(); i++ {
			if !s.ReadBlock(o, int64(i%nblocks), p) {
				b.Fatal("miss")
			}
		}
	})
	// Reads counted toward a read check (WholeFile.CheckAsRead), asked
	// again each time one is done: the cost of the counting and the
	// stamps at each end.
	b.Run("ReadBlockReadCheck", func(b *testing.B) {
		p := make([]byte, bs)
		b.SetBytes(bs)
		for i := 0; b.Loop(); i++ {
			if i%nblocks == 0 {
				w, ok := s.Whole(o)
				if !ok {
					b.Fatal("not whole")
				}
				s.mu.Lock()
				w.e.verified = fileStamp{}
				s.mu.Unlock()
				w.CheckAsRead()
				w.Release()
			}
			if !s.ReadBlock(o, int64(i%nblocks), p) {
				b.Fatal("miss")
			}
		}
		b.ReportMetric(float64(s.Stats().ReadChecks), "checks")
	})
	b.Run("ReadBlockParallel", func(b *testing.B) {
		b.SetBytes(bs)
		b.RunParallel(func(pb *testing.PB) {
			p := make([]byte, bs)
			for i := 0; pb.Next(); i++ {
				if !s.ReadBlock(o, int64(i%nblocks), p) {
					b.Fatal("miss")
				}
			}
		})
	})
	b.Run("RawPread", func(b *testing.B) {
		s.mu.Lock()
		e := s.entries[s.keyFor(o)]
		s.mu.Unlock()
		f, err := s.fileFor(e, false)
		require.NoError(b, err)
		p := make([]byte, bs)
		b.SetBytes(bs)
		for i := 0; b.Loop(); i++ {
			if _, err := f.ReadAt(p, int64(i%nblocks)*bs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Miss", func(b *testing.B) {
		absent := obj("bench/absent", nblocks*bs)
		p := make([]byte, bs)
		for i := 0; b.Loop(); i++ {
			s.ReadBlock(absent, int64(i%nblocks), p)
		}
	})
}

func BenchmarkWriteBlocks(b *testing.B) {
	const bs = DefaultBlockSize
	s, err := open(Config{Dir: b.TempDir(), BlockSize: bs, MaxSize: 256 << 20, BucketID: "bench"}, hooks{})
	require.NoError(b, err)
	b.Cleanup(func() { s.Close() })
	o := obj("w", 16*bs)
	data := blocksData(o, 0, 16, bs)
	b.SetBytes(int64(len(data)))
	for i := 0; b.Loop(); i++ {
		// A new object each time, so every write stores (and, past
		// 256 MiB, evicts).
		if s.WriteBlocks(obj(fmt.Sprint("w", i), 16*bs), 0, data) != 16 {
			b.Fatal("short write")
		}
	}
}

// BenchmarkWriteSmallObjects: an object under 4 KiB (written through the
// page cache) written whole into a new entry from a page-aligned buffer,
// as readahead's, without and with CheckWrites (the file read back and
// checked), per object.
func BenchmarkWriteSmallObjects(b *testing.B) {
	for _, size := range []int64{512, 3 << 10} {
		for _, check := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dB/check=%v", size, check), func(b *testing.B) {
				s, err := open(Config{Dir: b.TempDir(), MaxSize: 1 << 30, BucketID: "bench", CheckWrites: check}, hooks{})
				require.NoError(b, err)
				b.Cleanup(func() { s.Close() })
				o := obj("w", uint64(size))
				n := numBlocks(o.Size, DefaultBlockSize)
				data := aligned(blocksData(o, 0, n, DefaultBlockSize))
				b.SetBytes(size)
				for i := 0; b.Loop(); i++ {
					if s.WriteBlocks(obj(fmt.Sprint("w", i), uint64(size)), 0, data) != int(n) {
						b.Fatal("short write")
					}
				}
				if check && s.Stats().WholeChecks == 0 {
					b.Fatal("no check")
				}
			})
		}
	}
}

// BenchmarkCommitNewEntries: the index commit of new one-block entries
// into a cache of largeIndexRows small entries (their records, access
// times and checks), per entry. Run it with a fixed count (-benchtime
// 20000x): each round builds the large index first.
func BenchmarkCommitNewEntries(b *testing.B) {
	dir := b.TempDir()
	s, err := open(testConfig(Config{Dir: dir}), hooks{})
	require.NoError(b, err)
	require.NoError(b, s.Close())
	writeEntryRows(b, dir, largeIndexRows)
	s, err = open(testConfig(Config{Dir: dir, MaxSize: 1 << 40}), hooks{flushTick: make(chan time.Time)})
	require.NoError(b, err)
	defer s.Close()
	b.ResetTimer()
	// Commits of 1,000 entries, about what a cold epoch of small files
	// commits a second; under flushBlocks, so that no write kicks one.
	for first := 0; first < b.N; first += 1000 {
		b.StopTimer()
		for i := first; i < min(b.N, first+1000); i++ {
			o := obj(fmt.Sprintf("new%d", i), testBS)
			require.Equal(b, 1, s.WriteBlocks(o, 0, blockData(o, 0, testBS)))
		}
		b.StartTimer()
		require.NoError(b, s.flush())
	}
}

// writeEntryRows writes the rows of n one-block entries, checked, into
// the index in dir, as a large cache of small files leaves them (their
// data files do not matter until an entry is used).
func writeEntryRows(tb testing.TB, dir string, n int) {
	db, err := bolt.Open(filepath.Join(dir, "v1", "index.db"), 0o600, nil)
	require.NoError(tb, err)
	defer db.Close()
	present := newBitmap(1)
	present.set(0)
	for first := 0; first < n; first += 50_000 {
		require.NoError(tb, db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(rowsBucket)
			for i := first; i < min(n, first+50_000); i++ {
				var seed [8]byte
				binary.LittleEndian.PutUint64(seed[:], uint64(i))
				row := uint64(i + 1)
				for _, r := range []struct {
					tag byte
					v   []byte
				}{
					{tagAtime, encodeAtime(int64(i), 4096, sha256.Sum256(seed[:]))},
					{tagChecked, encodeChecked("boot", fileStamp{dev: 1, ino: uint64(i), size: testBS})},
					{tagEntry, encodeHeader(&record{name: fmt.Sprintf("old%d", i), version: "1", size: testBS,
						blockSize: testBS, present: present, crcs: []uint32{uint32(i)}})},
				} {
					k := rowKey(row, r.tag)
					if err := b.Put(k, seal(k, r.v)); err != nil {
						return err
					}
				}
			}
			return nil
		}))
	}
}

// BenchmarkOpenWithoutSnapshot: Open of a cache of largeIndexRows small
// entries with no snapshot (as after a crash), which scans the index;
// per entry. Run it with -benchtime 1x.
func BenchmarkOpenWithoutSnapshot(b *testing.B) {
	dir := b.TempDir()
	s, err := open(testConfig(Config{Dir: dir}), hooks{})
	require.NoError(b, err)
	require.NoError(b, s.Close())
	writeEntryRows(b, dir, largeIndexRows)
	b.ResetTimer()
	for range b.N {
		s, err = open(testConfig(Config{Dir: dir, MaxSize: 1 << 40}), hooks{})
		b.StopTimer()
		require.NoError(b, err)
		require.EqualValues(b, largeIndexRows, s.Stats().ColdEntries)
		require.NoError(b, s.Close())
		require.NoError(b, os.Remove(filepath.Join(dir, "v1", snapshotName)))
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*largeIndexRows), "ns/entry")
}
