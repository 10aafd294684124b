//go:build !linux

package fuse

import (
	"syscall"

	"github.com/jacobsa/fuse/fuseops"
)

const maxFreePipes = 0

type splicePipe struct{}

func (c *Connection) closePipes() {}

// Spliced counts the read replies spliced so far: none here.
func (c *Connection) Spliced() uint64 { return 0 }

// replySplice: no splice here; the reply is copied.
func (c *Connection) replySplice(unique uint64, o *fuseops.ReadFileOp) (bool, error) {
	return false, nil
}

func readSpliceFile(o *fuseops.ReadFileOp) error {
	buf := make([]byte, o.BytesRead)
	k, _ := o.SpliceFile.ReadAt(buf, o.SpliceOff)
	if k != len(buf) && o.SpliceFallback != nil {
		k, _ = o.SpliceFallback(buf)
	}
	if k != len(buf) {
		return syscall.EIO
	}
	o.Data = [][]byte{buf}
	return nil
}
