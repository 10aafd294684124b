package filecache

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// TestDataFileNameIsStable pins the on-disk key: the SHA-256 of (bucket
// ID, name, version, size) names the data file and the index row. A cache
// directory written by an earlier ferry must be found by a later one, so
// this hash must never change (it was computed outside Go, from the
// length-prefixed fields keyFor documents).
func TestDataFileNameIsStable(t *testing.T) {
	const want = "8793af82787417a9d031f64dfb68b8921635c76fa3fdd053eda3d5e3646a9fe2"
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir, BucketID: "mem://test"}, hooks{})
	o := Key{Name: "train/a.rec", Version: "1700000000000001", Size: 123456789}
	assert.Equal(t, want, s.keyFor(o))

	require.Equal(t, 1, s.WriteBlocks(o, 0, blockData(o, 0, testBS)))
	require.NoError(t, s.Close())
	_, err := os.Stat(filepath.Join(dir, "v1", "data", want[:2], want))
	require.NoError(t, err, "the data file is named by the key")

	os.Remove(filepath.Join(dir, "v1", snapshotName)) // the index's rows, not the snapshot's
	db, idx, err := openIndex(filepath.Join(dir, "v1", "index.db"), nil, t.Logf)
	require.NoError(t, err)
	defer db.Close()
	assert.Empty(t, idx.bad)
	rows := idx.rows
	require.Len(t, rows, 1)
	assert.Equal(t, want, rows[0].key.String(), "the index's atime row holds it")
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		k := rowKey(rows[0].row, tagEntry)
		rec, err := decodeRecord(k, tx.Bucket(rowsBucket).Get(k))
		require.NoError(t, err)
		assert.Equal(t, "train/a.rec", rec.name)
		return nil
	}))
}
