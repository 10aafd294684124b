package fs

import (
	"context"

	"ferry/bucket"
	"ferry/bucket/mem"
)

// testBucket is bucket/mem with the few helpers fs tests use. Its request
// counters (mem.Stats) are how the tests see requests saved by the cache.
type testBucket struct {
	*mem.Bucket
}

func newTestBucket() *testBucket { return &testBucket{mem.New("bucket")} }

// put stores data under name and returns the new object.
func (b *testBucket) put(name string, data []byte) bucket.Object {
	o, err := b.Put(context.Background(), &bucket.PutRequest{Name: name, Data: data})
	if err != nil {
		panic(err) // mem.Put fails only by injected fault
	}
	return *o
}

// requests counts Stat, List and NewRangeReader calls so far.
func (b *testBucket) requests() int64 {
	s := b.Stats()
	return s.Stats + s.Lists + s.Reads
}

// metadataRequests counts Stat and List calls so far.
func (b *testBucket) metadataRequests() int64 {
	s := b.Stats()
	return s.Stats + s.Lists
}
