package filecache

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
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
