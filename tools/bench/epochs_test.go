package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"ferry/tools/bench/dataset"
)

func TestEpochsOptions(t *testing.T) {
	o, err := parse(t, "run")
	require.NoError(t, err)
	assert.NotContains(t, o.Workloads, epochsName, "not run by default")
	assert.Equal(t, 4, o.EpochsFiles)
	assert.Equal(t, int64(256<<20), o.EpochsSize)
	assert.Equal(t, 1, o.EpochsStreams)
	assert.Equal(t, 3, o.EpochsRestarts)
	assert.Empty(t, datasetSpec(o).Group(epochsName), "it writes its own source: no upload, no shared local copy")

	o, err = parse(t, "run", "--workloads", "epochs", "--epochs-files", "2", "--epochs-size", "16MiB", "--epochs-streams", "2")
	require.NoError(t, err)
	assert.Equal(t, []string{epochsName}, o.Workloads)
	assert.Equal(t, dataset.Group{Dir: epochsName, Count: 2, Size: 16 << 20}, epochsGroup(o))
	assert.Equal(t, 2, o.EpochsStreams)

	_, err = parse(t, "run", "--workloads", "epochs", "--epochs-files", "0")
	assert.ErrorContains(t, err, "--epochs-files")
	_, err = parse(t, "run", "--workloads", "epochs", "--epochs-streams", "0")
	assert.ErrorContains(t, err, "--epochs-streams")
	_, err = parse(t, "run", "--workloads", "epochs", "--epochs-restarts", "0")
	assert.ErrorContains(t, err, "--epochs-restarts")
	_, err = parse(t, "run", "--workloads", "epochs", "--epochs-size", "0")
	assert.ErrorContains(t, err, "must be positive")
	_, err = parse(t, "run", "--workloads", "epochs", "--target-dir", t.TempDir())
	assert.ErrorContains(t, err, "--target-dir")
	_, err = parse(t, "run", "--workloads", "epochs", "--ferry-args", "--metrics-addr=127.0.0.1:9")
	assert.ErrorContains(t, err, "--metrics-addr")
	_, err = parse(t, "run", "--workloads", "seq-1", "--ferry-args", "--metrics-addr 127.0.0.1:9")
	assert.NoError(t, err, "only epochs needs its own")
}

func TestEpochsMounts(t *testing.T) {
	assert.Equal(t, [][]string{
		{"epoch 1", "epoch 2", "epoch 3"},
		{"epoch 2' #1", "epoch 3' #1"},
		{"epoch 2' #2", "epoch 3' #2"},
	}, epochsMounts(2))
}

func TestEpochCountersFromMetrics(t *testing.T) {
	text := `# HELP ferry_cache_hits_bytes_total Bytes served from the local cache.
ferry_cache_hits_bytes_total 3145728
ferry_cache_whole_checks_total 2
ferry_cache_whole_checked_bytes_total 2097152
ferry_cache_read_checks_total 1
ferry_fs_passthrough_opens_total{mode="ro"} 3
ferry_fs_passthrough_opens_total{mode="rw"} 1
ferry_cache_misses_bytes_total 99
`
	m, err := parseMetrics(strings.NewReader(text), metricWholeChecks, metricWholeChecked, metricReadChecks, metricHitBytes, metricPassthrough)
	require.NoError(t, err)
	c := countersOf(m)
	assert.Equal(t, epochCounters{WholeChecks: 2, WholeCheckedBytes: 2 << 20, ReadChecks: 1, HitBytes: 3 << 20, PassthroughOpens: 4}, c)

	d := c.sub(epochCounters{WholeChecks: 1, WholeCheckedBytes: 1 << 20, ReadChecks: 1, HitBytes: 1 << 20, PassthroughOpens: 1})
	assert.Equal(t, epochCounters{WholeChecks: 1, WholeCheckedBytes: 1 << 20, HitBytes: 2 << 20, PassthroughOpens: 3}, d)
	assert.Equal(t, "passthrough opens 3, cache hits 2 MiB, read checks 0, whole checks 1 (1 MiB)", d.String())
}

func TestReadsPerByte(t *testing.T) {
	const total = 4 << 20
	// Served through ferry from its cache: each byte once.
	assert.Equal(t, 1.0, readsPerByte(epochCounters{HitBytes: total, ReadChecks: 4}, total))
	// Checked whole at the open, then passthrough: ferry once (and the
	// kernel once more).
	assert.Equal(t, 1.0, readsPerByte(epochCounters{WholeChecks: 4, WholeCheckedBytes: total, PassthroughOpens: 4}, total))
	// Checked whole at the open and then served through ferry: twice.
	assert.Equal(t, 2.0, readsPerByte(epochCounters{WholeCheckedBytes: total, HitBytes: total}, total))
	// Passthrough only.
	assert.Zero(t, readsPerByte(epochCounters{PassthroughOpens: 4}, total))
	assert.Zero(t, readsPerByte(epochCounters{HitBytes: 1}, 0))
}

// epochRow is a ferry or local row of the epochs workload at mibps.
func epochRow(phase, target string, mibps float64) Row {
	return Row{Workload: epochsName, Phase: phase, Target: target, Bytes: 1 << 30, Seconds: 1024 / mibps}
}

func TestEpochsTargets(t *testing.T) {
	rows := []Row{
		epochRow(phaseLocalFresh, "local", 500),
		epochRow(PhaseLocal, "local", 1000),
		epochRow(phaseEpoch1, "ferry", 700),
		epochRow(phaseEpoch2, "ferry", 800),
		epochRow(phaseEpoch3, "ferry", 1000),
		epochRow(restartPhase(phaseEpoch2R, 1), "ferry", 900),
		epochRow(restartPhase(phaseEpoch3R, 1), "ferry", 1000),
		epochRow(restartPhase(phaseEpoch2R, 2), "ferry", 600),
		epochRow(restartPhase(phaseEpoch3R, 2), "ferry", 1200),
		epochRow(restartPhase(phaseEpoch2R, 3), "ferry", 640),
		epochRow(restartPhase(phaseEpoch3R, 3), "ferry", 800),
	}
	ts := epochsTargets(rows)
	require.Len(t, ts, 2)
	assert.InDelta(t, 0.8, ts[0].Value, 1e-9)
	assert.False(t, ts[0].Met)
	assert.Contains(t, ts[0].What, "epoch 2 over epoch 3 in the same mount")
	assert.Equal(t, "80% (800 / 1000 MiB/s); local disk fresh / again 50% (500 / 1000); passthrough epochs 800-1200 MiB/s", ts[0].Shown)
	// Restarts: 90%, 50%, 80%; the median is 80%.
	assert.InDelta(t, 0.8, ts[1].Value, 1e-9)
	assert.False(t, ts[1].Met)
	assert.Contains(t, ts[1].What, "epoch 2' over epoch 3' after a restart, median of 3 restarts")
	assert.Equal(t, "80%: 90% (900 / 1000), 50% (600 / 1200), 80% (640 / 800) MiB/s; passthrough epochs 800-1200 MiB/s", ts[1].Shown)

	// Exactly 85% (17 / 20) is met.
	one := []Row{
		{Workload: epochsName, Phase: restartPhase(phaseEpoch2R, 1), Target: "ferry", Bytes: 17, Seconds: 1},
		{Workload: epochsName, Phase: restartPhase(phaseEpoch3R, 1), Target: "ferry", Bytes: 20, Seconds: 1},
	}
	ts = epochsTargets(one)
	require.Len(t, ts, 1)
	assert.True(t, ts[0].Met, "85% is met")
	assert.NotContains(t, ts[0].Shown, "passthrough epochs", "one passthrough epoch has no spread")

	// A failed epoch is no figure, and a restart without its epoch 3'
	// ends the restarts counted.
	rows[3].Error = "boom"
	ts = epochsTargets(rows[:10])
	require.Len(t, ts, 1, "epoch 2 failed")
	assert.Contains(t, ts[0].What, "median of 2 restarts")
	assert.InDelta(t, 0.7, ts[0].Value, 1e-9, "median of 90% and 50%")
	assert.Empty(t, epochsTargets(nil))
}

func TestEpochsSource(t *testing.T) {
	o := Options{WorkDir: "/work/dir", Store: "gcs"}
	h := fakeHost{shmType: unix.TMPFS_MAGIC, shmFree: 8 << 30, mem: 8 << 30}
	dir, why := epochsSource(o, 1<<30, h.probe())
	assert.Empty(t, why)
	assert.True(t, strings.HasPrefix(dir, shmDir+"/ferry-benchmark-epochs-"), dir)
	other, _ := epochsSource(Options{WorkDir: "/other"}, 1<<30, h.probe())
	assert.NotEqual(t, dir, other, "each work directory has its own")

	for name, h := range map[string]fakeHost{
		"not tmpfs":  {shmType: 0xef53, shmFree: 8 << 30, mem: 8 << 30},
		"no room":    {shmType: unix.TMPFS_MAGIC, shmFree: 1<<30 - 1, mem: 8 << 30},
		"no memory":  {shmType: unix.TMPFS_MAGIC, shmFree: 8 << 30, mem: 1<<30 + memBeside},
		"statfs err": {shmErr: os.ErrNotExist},
	} {
		dir, why := epochsSource(o, 1<<30, h.probe())
		assert.Equal(t, filepath.Join(o.WorkDir, "epochs-src"), dir, name)
		assert.NotEmpty(t, why, name)
	}
}

func TestWriteDirectWritesTheDataset(t *testing.T) {
	// One aligned size and one with an unaligned tail.
	for _, size := range []int64{3 << 20, 1<<20 + 5000} {
		spec := dataset.Spec{Seed: 3, Groups: []dataset.Group{{Dir: epochsName, Count: 2, Size: size}}}
		dir := t.TempDir()
		_, err := writeDirect(spec, dir)
		require.NoError(t, err)
		for _, f := range spec.Files() {
			got, err := os.ReadFile(filepath.Join(dir, f.Name))
			require.NoError(t, err)
			require.Len(t, got, int(size))
			require.NoError(t, spec.Verify(f.Name, 0, got), "%s of %d", f.Name, size)
		}
	}
}
