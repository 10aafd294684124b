package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPageCacheFolios: every page of a file just read is found, and its
// folios are at least one and at most one per page. (Which pages begin a
// folio depends on the kernel and the file system, so the tail flag's
// reading is checked by hand, not here: on kernel 6.18, 537 folios for a
// 1 GiB ext4 file and one per page through FUSE.)
func TestPageCacheFolios(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("page frame numbers need root")
	}
	if _, err := os.Stat("/proc/kpageflags"); err != nil {
		t.Skip("no /proc/kpageflags (CONFIG_PROC_PAGE_MONITOR)")
	}
	page := os.Getpagesize()
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, make([]byte, 64*page+100), 0o600))

	s, err := pageCacheFolios(path, 1<<30)
	if errors.Is(err, errPFNHidden) {
		t.Skip(err)
	}
	require.NoError(t, err)
	assert.EqualValues(t, 64, s.pages, "whole pages of the file")
	assert.GreaterOrEqual(t, s.folios, int64(1))
	assert.LessOrEqual(t, s.folios, s.pages)
	assert.Equal(t, s.pages*int64(page)/1024/s.folios, s.meanKiB())

	s, err = pageCacheFolios(path, int64(16*page))
	require.NoError(t, err)
	assert.EqualValues(t, 16, s.pages, "at most max bytes")

	_, err = pageCacheFolios(filepath.Join(t.TempDir(), "missing"), 1<<20)
	assert.Error(t, err)
	small := filepath.Join(t.TempDir(), "small")
	require.NoError(t, os.WriteFile(small, []byte("x"), 0o600))
	_, err = pageCacheFolios(small, 1<<20)
	assert.ErrorContains(t, err, "smaller than a page")
}
