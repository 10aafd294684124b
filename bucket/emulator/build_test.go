package emulator

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBuildIsAnnounced: a build says what it builds and about how long it
// takes before it starts (the first run's long silence), and a binary
// already there is found silently. The module proxy is off, so the build
// fails at once without the network.
func TestBuildIsAnnounced(t *testing.T) {
	t.Setenv("FERRY_EMULATOR_DIR", t.TempDir())
	t.Setenv("GOPROXY", "off")
	tool := Tool{Name: "nothing", Package: "example.invalid/nothing", Version: "v0.0.1",
		EnvVar: "FERRY_TEST_NOTHING", FirstBuild: 45 * time.Second}
	var said []string
	say := func(format string, args ...any) { said = append(said, fmt.Sprintf(format, args...)) }
	_, err := BinaryTelling(t.Context(), tool, say)
	require.Error(t, err)
	assert.Equal(t, []string{"building nothing v0.0.1, once; with empty Go caches this takes about 45s"}, said)

	said = nil
	bin := filepath.Join(t.TempDir(), "prebuilt")
	require.NoError(t, os.WriteFile(bin, nil, 0o755))
	t.Setenv(tool.EnvVar, bin)
	got, err := BinaryTelling(t.Context(), tool, say)
	require.NoError(t, err)
	assert.Equal(t, bin, got)
	assert.Empty(t, said, "nothing is built, nothing said")
}
