package fs

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"ferry/bucket"
	"ferry/metadata"
)

// heapInUse is the bytes of live heap objects, after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestInodeBytesAreWhatIsCharged: the memory the kernel's inodes hold is
// what the metadata limit is charged for them (inodeBytes), within a
// quarter, so that the bound holds what it says; and an inode of a file
// the kernel looked up but never opened costs at most 252 bytes with
// its two map slots and its path and version of 43 bytes (kept as one
// string, not two).
func TestInodeBytesAreWhatIsCharged(t *testing.T) {
	fs := newTestFS(t, newTestBucket(), nil, nil)
	const n = 50_000
	updated := time.Unix(1800000000, 0)
	before := heapInUse()
	var charged int64
	fs.mu.Lock()
	for i := range n {
		// The path and version in one allocation, as a listing's entry
		// has them (metadata.DirEntry), and the path again, as a lookup
		// makes it from its parent's and the name.
		path := fmt.Sprintf("train/n%05d/%012d", i%1000, i)
		full := fmt.Sprintf("%s512-%015d", path, i)
		e := metadata.Entry{Kind: metadata.File, Obj: bucket.Object{
			Name: full[:len(path)], Size: 512, Version: full[len(path):], Updated: updated}}
		in := fs.acquire(path, e)
		charged += inodeBytes(in)
	}
	fs.mu.Unlock()
	used := heapInUse() - before
	per := float64(used) / n
	t.Logf("inodes: %.0f bytes each in the heap, %.0f charged", per, float64(charged)/n)
	assert.InDelta(t, 1, float64(charged)/float64(used), 0.25, "charged %d bytes for %d in use", charged, used)
	assert.LessOrEqual(t, per, 252.0)
	runtime.KeepAlive(fs)
}
