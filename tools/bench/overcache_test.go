package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOverCacheOptions(t *testing.T) {
	o, err := parse(t, "run")
	require.NoError(t, err)
	assert.NotContains(t, o.Workloads, overCacheName, "not run by default")
	assert.Empty(t, datasetSpec(o).Group("epochs"))

	o, err = parse(t, "run", "--workloads", "seq-n,over-cache", "--over-cache-files", "30", "--over-cache-size", "2MiB")
	require.NoError(t, err)
	files := datasetSpec(o).Group("epochs")
	require.Len(t, files, 30)
	assert.Equal(t, int64(2<<20), files[0].Size)

	_, err = parse(t, "run", "--workloads", "over-cache", "--over-cache-epochs", "1")
	assert.ErrorContains(t, err, "--over-cache-epochs")
	_, err = parse(t, "run", "--workloads", "over-cache", "--target-dir", t.TempDir())
	assert.ErrorContains(t, err, "--target-dir")
}

func TestHitRatio(t *testing.T) {
	assert.Equal(t, 1.0, hitRatio(0, 100))
	assert.Equal(t, 0.25, hitRatio(75, 100))
	assert.Zero(t, hitRatio(150, 100), "readahead past what was read is not a negative hit")
	assert.Zero(t, hitRatio(0, 0))
}
