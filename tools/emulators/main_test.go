package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket/emulator"
)

// TestRunPrintsExports uses prebuilt binaries named by the environment,
// as CI does after the first build, so nothing is compiled here.
func TestRunPrintsExports(t *testing.T) {
	dir := t.TempDir()
	tools := []emulator.Tool{emulator.FakeGCS, emulator.VersityGW, emulator.Weed}
	for _, tool := range tools {
		p := filepath.Join(dir, tool.Name)
		require.NoError(t, os.WriteFile(p, nil, 0o755))
		t.Setenv(tool.EnvVar, p)
	}
	var out, log bytes.Buffer
	require.NoError(t, run(context.Background(), tools, &out, &log))
	assert.Equal(t,
		"export FERRY_FAKE_GCS_SERVER=\""+filepath.Join(dir, "fake-gcs-server")+"\"\n"+
			"export FERRY_VERSITYGW=\""+filepath.Join(dir, "versitygw")+"\"\n"+
			"export FERRY_WEED=\""+filepath.Join(dir, "weed")+"\"\n", out.String())
	assert.Contains(t, log.String(), "fake-gcs-server@v1.56.1 ready")
}

func TestRunFailsOnAMissingBinary(t *testing.T) {
	t.Setenv(emulator.FakeGCS.EnvVar, filepath.Join(t.TempDir(), "absent"))
	var out, log bytes.Buffer
	require.Error(t, run(context.Background(), []emulator.Tool{emulator.FakeGCS}, &out, &log))
	assert.Empty(t, out.String(), "no export line for a binary that is not there")
}
