package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckMountPoint(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	full := filepath.Join(dir, "full")
	file := filepath.Join(dir, "file")
	require.NoError(t, os.Mkdir(empty, 0o755))
	require.NoError(t, os.Mkdir(full, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(full, "f"), nil, 0o644))
	require.NoError(t, os.WriteFile(file, nil, 0o644))

	for _, repair := range []bool{false, true} {
		assert.NoError(t, checkMountPoint(empty, false, repair))
		assert.NoError(t, checkMountPoint(full, true, repair), "--nonempty")
		assert.EqualError(t, checkMountPoint(full, false, repair),
			"mount point "+full+" is not empty (mounting would hide its files); give --nonempty (fstab: nonempty) to mount over it anyway")
		assert.EqualError(t, checkMountPoint(file, true, repair), "mount point "+file+" is not a directory")
		assert.EqualError(t, checkMountPoint(filepath.Join(dir, "missing"), true, repair),
			"mount point "+filepath.Join(dir, "missing")+" does not exist")
	}
	// A mount point that is no ferry mount is left as it is.
	assert.NoError(t, checkMountPoint("/proc", true, true))
}
