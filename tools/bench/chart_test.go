package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChartSeries(t *testing.T) {
	ws, phases, v := chartSeries(sampleRows())
	assert.Equal(t, []string{"seq-1", "unet3d"}, ws, "walk (ops only) and failed rows are left out")
	assert.Equal(t, []string{PhaseLocal, PhaseCold, PhaseWarm}, phases)
	assert.InDelta(t, 1000, v[PhaseLocal][0], 1e-9)
	assert.InDelta(t, 400, v[PhaseCold][0], 1e-9)
	assert.Zero(t, v[PhaseLocal][1], "no local unet3d row: an empty bar")
}

func TestWriteChart(t *testing.T) {
	for _, format := range []string{"svg", "png"} {
		var b bytes.Buffer
		require.NoError(t, writeChart(&b, "test", sampleRows(), 477, format))
		assert.Greater(t, b.Len(), 1000, format)
	}
	var b bytes.Buffer
	assert.Error(t, writeChart(&b, "empty", nil, 0, "svg"))
}
