package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestWarmCheckWithoutDiskCache: `ferry warm --check` on a mount without
// a disk cache says so once, with what to do, and prints no figures.
func TestWarmCheckWithoutDiskCache(t *testing.T) {
	s := newStore(t, "file")
	s.put(t, "train/a", []byte("a"))
	m := mount(t, s)
	out, errOut, code := ferryCmd(t, "", "warm", "--check", m.dir)
	assert.Equal(t, 1, code)
	assert.Empty(t, out)
	assert.Equal(t, "ferry: warm --check: "+m.dir+": the mount has no disk cache: nothing to check (mount it with --cache-dir to keep what is read on local disk)\n", errOut)
}
