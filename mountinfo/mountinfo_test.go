package mountinfo

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sample is a mount table as the kernel writes it: optional fields
// (shared:N) before the separator, octal escapes in mount points, FUSE
// super options with user_id, a ferry mounted twice on one point, and a
// line too short to be a mount.
const sample = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:21 / /proc rw,nosuid - proc proc rw
40 22 0:50 / /mnt/my\040data rw,nosuid,nodev shared:7 master:2 - fuse.ferry gs://b rw,user_id=1000,group_id=1000
41 22 0:51 / /mnt/a rw - fuse.ferry file:///src rw,user_id=0,group_id=0
42 41 0:52 / /mnt/a/inner rw - tmpfs tmpfs rw
43 22 0:53 / /mnt/a rw - fuse.ferry s3://b rw,user_id=0,group_id=0
44 22 0:54 / /mnt/ab rw - tmpfs tmpfs rw,user_id=notanumber
garbage line
`

func TestParse(t *testing.T) {
	tab := Parse(sample)
	require.Len(t, tab, 7, "the garbage line is skipped")
	assert.Equal(t, Mount{Point: "/", FSType: "ext4", Dev: "8:1", Owner: -1}, tab[0])
	assert.Equal(t, Mount{Point: "/mnt/my data", FSType: FerryType, Dev: "0:50", Owner: 1000}, tab[2],
		"escaped space, optional fields before the separator, user_id")
	assert.Equal(t, -1, tab[6].Owner, "a user_id that is no number")

	// No separator: the mount point is still known, the type is not.
	tab = Parse("50 22 0:60 / /x rw\n")
	assert.Equal(t, Table{{Point: "/x", Dev: "0:60", Owner: -1}}, tab)
	assert.Empty(t, Parse(""))
}

func TestTop(t *testing.T) {
	tab := Parse(sample)
	m, ok := tab.Top("/mnt/a")
	require.True(t, ok)
	assert.Equal(t, "0:53", m.Dev, "the last mount on a point is on top")
	m, ok = tab.Top("/mnt/my data")
	require.True(t, ok)
	assert.Equal(t, "0:50", m.Dev)
	_, ok = tab.Top(`/mnt/my\040data`)
	assert.False(t, ok, "points are compared unescaped")
	_, ok = tab.Top("/mnt")
	assert.False(t, ok)
}

func TestHolding(t *testing.T) {
	tab := Parse(sample)
	for _, tc := range []struct{ path, dev string }{
		{"/", "8:1"},
		{"/etc/passwd", "8:1"},
		{"/mnt/a", "0:53"},         // the top of the two ferry mounts
		{"/mnt/a/x/y", "0:53"},     // below it
		{"/mnt/a/inner", "0:52"},   // a mount inside a mount owns its subtree
		{"/mnt/a/inner/f", "0:52"}, //
		{"/mnt/ab", "0:54"},        // not under /mnt/a: a name, not a prefix
		{"/mnt/abc", "8:1"},        //
		{"/mnt/my data/f", "0:50"}, //
	} {
		m, ok := tab.Holding(tc.path)
		require.True(t, ok, tc.path)
		assert.Equal(t, tc.dev, m.Dev, tc.path)
	}
	_, ok := Parse("23 22 0:21 / /proc rw - proc proc rw\n").Holding("/etc")
	assert.False(t, ok, "no mount holds it")
}

func TestUnescape(t *testing.T) {
	assert.Equal(t, "/mnt/a b", unescape(`/mnt/a\040b`))
	assert.Equal(t, "/mnt/tab\there", unescape(`/mnt/tab\011here`))
	assert.Equal(t, `/mnt/back\slash`, unescape(`/mnt/back\134slash`))
	assert.Equal(t, `/mnt/x\09`, unescape(`/mnt/x\09`), "not an escape")
	assert.Equal(t, `/mnt/end\04`, unescape(`/mnt/end\04`), "cut short")
	assert.Equal(t, "/plain", unescape("/plain"))
}

// TestMountinfo reads the real table.
func TestMountinfo(t *testing.T) {
	assert.True(t, IsMountPoint("/"), "/ is always a mount point")
	assert.False(t, IsMountPoint(t.TempDir()))
	m, ok := Read().Holding(t.TempDir())
	require.True(t, ok)
	assert.NotEmpty(t, m.Dev)
	dev, err := DeviceOf("/")
	require.NoError(t, err)
	assert.Regexp(t, `^[0-9]+:[0-9]+$`, dev)
	_, err = DeviceOf("/nonexistent/path")
	assert.Error(t, err)
}
