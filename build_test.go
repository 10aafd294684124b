package main

import (
	"log/slog"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLimitHeap: the runtime's memory limit is the budget plus the
// overhead, or GOMEMLIMIT's; buffers mapped outside the heap lower it by
// as much, never below the overhead.
func TestLimitHeap(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	log := slog.New(slog.DiscardHandler)
	const mib = 1 << 20

	t.Setenv("GOMEMLIMIT", "")
	assert.Nil(t, limitHeap(0, log), "no budget, no GOMEMLIMIT: nothing to keep")

	offHeap := limitHeap(512*mib, log)
	require.NotNil(t, offHeap)
	assert.EqualValues(t, 512*mib+heapOverhead, debug.SetMemoryLimit(-1))
	offHeap(100 * mib)
	assert.EqualValues(t, 412*mib+heapOverhead, debug.SetMemoryLimit(-1))
	offHeap(2048 * mib)
	assert.EqualValues(t, heapOverhead, debug.SetMemoryLimit(-1), "never below the overhead")
	offHeap(0)
	assert.EqualValues(t, 512*mib+heapOverhead, debug.SetMemoryLimit(-1))

	// GOMEMLIMIT (read by the runtime at start) wins, and is lowered too.
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetMemoryLimit(1024 * mib)
	offHeap = limitHeap(512*mib, log)
	require.NotNil(t, offHeap)
	assert.EqualValues(t, 1024*mib, debug.SetMemoryLimit(-1))
	offHeap(256 * mib)
	assert.EqualValues(t, 768*mib, debug.SetMemoryLimit(-1))
}
