package fs

import (
	"context"
	"strconv"
	"syscall"

	"github.com/jacobsa/fuse/fuseops"
)

// Read-only extended attributes that let `ferry warm --check` and
// `ferry invalidate` ask the mount about itself through any path in it.
// getxattr works on a read-only mount (setxattr does not), needs no
// socket, and reaches the right daemon however the mount is named
// (bind mounts, symlinks, containers). They are not listed by listxattr,
// so that copying files out of the mount (cp -a, rsync -X) does not copy
// them.
const (
	// XattrCached on a file: how many of its bytes are in the local disk
	// cache, in decimal. Absent (ENODATA) without a disk cache. Reading it
	// fetches nothing.
	XattrCached = "user.ferry.cached"
	// XattrControl on any inode: the path of the daemon's control socket.
	// Absent when the daemon has none.
	XattrControl = "user.ferry.control"
	// XattrPath on any inode: its object path relative to the mount, with
	// a leading slash ("/" for the mount root).
	XattrPath = "user.ferry.path"
)

// GetXattr answers the user.ferry.* attributes and ENODATA to everything
// else. Since it is implemented, the kernel asks (for example for
// security.capability or ACLs on `ls -l`); those answers cost one round
// trip and take no lock but fs.mu, briefly.
func (fs *fileSystem) GetXattr(ctx context.Context, op *fuseops.GetXattrOp) error {
	var value string
	switch op.Name {
	case XattrPath, XattrCached, XattrControl:
	default:
		return syscall.ENODATA
	}
	fs.mu.Lock()
	in, ok := fs.inodes[op.Inode]
	fs.mu.Unlock()
	if !ok {
		return syscall.ESTALE
	}
	switch op.Name {
	case XattrPath:
		value = objectPath(in)
	case XattrControl:
		if fs.controlSocket == "" {
			return syscall.ENODATA
		}
		value = fs.controlSocket
	case XattrCached:
		if in.dir || fs.cachedBytes == nil {
			return syscall.ENODATA
		}
		// The version a read would get now (from the metadata cache while
		// it is fresh).
		obj, err := fs.refresh(ctx, in)
		if err != nil {
			return err
		}
		value = strconv.FormatInt(fs.cachedBytes(obj), 10)
	}
	op.BytesRead = len(value)
	if len(op.Dst) == 0 {
		return nil // the caller asks for the size
	}
	if len(op.Dst) < len(value) {
		return syscall.ERANGE
	}
	copy(op.Dst, value)
	return nil
}
