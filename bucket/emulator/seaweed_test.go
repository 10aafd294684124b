package emulator

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBuiltNeverBuilds checks that Built finds a binary where Binary
// would put it, or where $EnvVar names it, and answers ErrNotBuilt
// otherwise, without starting a build.
func TestBuiltNeverBuilds(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FERRY_EMULATOR_DIR", dir)
	t.Setenv(Weed.EnvVar, "")

	_, err := Built(Weed)
	require.ErrorIs(t, err, ErrNotBuilt)
	assert.Contains(t, err.Error(), Weed.EnvVar, "the error says how to point at a binary")
	entries, _ := os.ReadDir(dir)
	assert.Empty(t, entries, "nothing was built or made")

	bin := filepath.Join(dir, Weed.Name+"-"+Weed.Version, Weed.Name)
	require.NoError(t, os.MkdirAll(filepath.Dir(bin), 0o755))
	require.NoError(t, os.WriteFile(bin, nil, 0o755))
	got, err := Built(Weed)
	require.NoError(t, err)
	assert.Equal(t, bin, got)

	t.Setenv(Weed.EnvVar, filepath.Join(dir, "absent"))
	_, err = Built(Weed)
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrNotBuilt), "a wrong $%s is the user's error, not a build to start", Weed.EnvVar)
}
