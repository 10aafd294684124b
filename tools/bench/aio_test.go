package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/tools/bench/dataset"
)

func TestParseFio(t *testing.T) {
	r, err := parseFio([]byte(`{"fio version": "fio-3.33", "jobs": [{"jobname": "aio-psync-16", "error": 0,
		"read": {"io_bytes": 268435456, "total_ios": 2048, "runtime": 4000, "iops": 512.0}}]}`))
	require.NoError(t, err)
	assert.Equal(t, Row{Bytes: 256 << 20, Ops: 2048, Seconds: 4}, r)
	assert.InDelta(t, 512, r.OpsRate(), 1e-9)

	for _, bad := range []string{
		`not json`,
		`{"jobs": []}`,
		`{"jobs": [{"error": 5, "read": {"io_bytes": 1, "total_ios": 1, "runtime": 1}}]}`,
		`{"jobs": [{"read": {"io_bytes": 0, "total_ios": 0, "runtime": 0}}]}`,
		`{"jobs": [{}, {}]}`,
	} {
		_, err := parseFio([]byte(bad))
		assert.Error(t, err, bad)
	}
}

func TestDropAIOWithoutFio(t *testing.T) {
	o := Options{Workloads: []string{"seq-1", "aio"}}
	got, note, err := dropAIOWithoutFio(o, "/usr/bin/fio")
	require.NoError(t, err)
	assert.Equal(t, o.Workloads, got.Workloads)
	assert.Empty(t, note)

	got, note, err = dropAIOWithoutFio(o, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"seq-1"}, got.Workloads)
	assert.Contains(t, note, "fio is not installed")
	assert.Equal(t, []string{"seq-1", "aio"}, o.Workloads, "the caller's options are not changed")

	_, _, err = dropAIOWithoutFio(Options{Workloads: []string{"aio"}}, "")
	assert.ErrorContains(t, err, "fio is not installed")
}

func TestAIOTarget(t *testing.T) {
	_, ok := aioTarget(nil)
	assert.False(t, ok, "no rows, no goal")
	row := func(name string, ops int64) Row {
		return Row{Workload: name, Phase: PhaseCold, Target: "ferry", Ops: ops, Seconds: 2}
	}
	tg, ok := aioTarget([]Row{row("aio-libaio", 800), row("aio-uring", 1), row("aio-psync-16", 1000)})
	require.True(t, ok)
	assert.InDelta(t, 0.8, tg.Value, 1e-9)
	assert.True(t, tg.Met)
	assert.Contains(t, tg.Shown, "400 / 500 IOPS")
	tg, _ = aioTarget([]Row{row("aio-libaio", 56), row("aio-psync-16", 838)})
	assert.False(t, tg.Met)
}

// Each shape reads the file once over with fio, as many blocks as it
// holds, when fio is installed.
func TestAIOShapesRunFio(t *testing.T) {
	if fioInstalled() == "" {
		t.Skip("fio is not installed")
	}
	spec := dataset.Spec{Seed: 1, Groups: []dataset.Group{{Dir: aioDir, Count: 1, Size: 4 << 20}}}
	dir, err := os.MkdirTemp(".", "aio-test-") // O_DIRECT: not on a tmpfs /tmp
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, spec.WriteDir(dir, nil))
	ws := aioWorkloads(Options{Seed: 1}, spec, Limits{})
	require.Len(t, ws, 3)
	for _, w := range ws {
		r, err := w.Run(t.Context(), dir, nil)
		if err != nil && w.Name == "aio-uring" {
			t.Logf("%s: %v (io_uring may be disabled here)", w.Name, err)
			continue
		}
		require.NoError(t, err, w.Name)
		assert.EqualValues(t, 4<<20, r.Bytes, w.Name)
		assert.EqualValues(t, 32, r.Ops, w.Name)
		require.NoError(t, w.Check(dir), w.Name)
	}
}
