package filecache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"path/filepath"
)

// Key names one object version as the store (the bucket) describes it
// when the object is looked up. The cache keeps each Key's bytes apart and
// never serves one Key's bytes for another's. On disk, within Config.Dir, a
// Key is the SHA-256 of (Config.BucketID, Name, Version, Size).
type Key struct {
	// Name is the object's name in the bucket.
	Name string
	// Version is the store's version of the object (a GCS generation, an
	// S3 ETag, ...): opaque, compared for equality only.
	Version string
	// Size is the object's length in bytes. It is part of the key: one
	// version has one size, and where the store gives no versions
	// (Version "") objects of different lengths still stay apart.
	Size uint64
}

// keyFor is the on-disk key of obj in this store's bucket, the hex
// SHA-256 of (bucket ID, name, version, size): it names the data file
// and the index row, so it must never change (an existing cache would be
// lost).
func (s *Store) keyFor(obj Key) string {
	sum := s.keySum(obj)
	return hex.EncodeToString(sum[:])
}

// keySum is keyFor in binary. Fields are length-prefixed so no two tuples
// hash the same input.
func (s *Store) keySum(obj Key) (sum coldKey) {
	h := sha256.New()
	var n [8]byte
	for _, f := range []string{"ferry-filecache-v1", s.bucketID, obj.Name, obj.Version} {
		binary.LittleEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	binary.LittleEndian.PutUint64(n[:], obj.Size)
	h.Write(n[:])
	h.Sum(sum[:0])
	return sum
}

func (s *Store) pathFor(key string) string {
	return filepath.Join(s.dataDir, key[:2], key)
}

// blockLen is the length of block idx, or -1 if the object has no such block.
func (s *Store) blockLen(obj Key, idx int64) int64 {
	if idx < 0 || idx >= numBlocks(obj.Size, s.blockSize) {
		return -1
	}
	return min(s.blockSize, int64(obj.Size)-idx*s.blockSize)
}
