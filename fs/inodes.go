package fs

import (
	"errors"
	"syscall"
	"time"
	"unsafe"

	"github.com/jacobsa/fuse/fuseops"

	"ferry/metadata"
)

// The inodes the kernel holds cost memory until it forgets them, and it
// forgets them only under its own memory pressure: after `find` over a
// million files, ferry would hold a million inodes. So their bytes count
// against the metadata's memory limit (metadata.Cache.Charge), and past
// half of it ferry asks the kernel to forget names it holds (FUSE
// notify_inval_entry), chosen at random among files, until they are back
// under three eighths. The kernel then drops the dentry and, once nothing
// uses the inode, sends the forget that frees it here; a name used again
// is looked up again, answered by the metadata cache.
//
// Directories are not chosen (forgetting one forgets its whole subtree),
// nor is anything while the kernel is not connected. A file open at the
// time keeps its inode until it is closed.

// trimState is the inode bound's state.
type trimState struct {
	limit int64 // bytes of inodes past which names are forgotten; 0: none
	// GUARDED_BY(fileSystem.mu):
	bytes   int64  // what the live inodes cost
	running bool   // trimInodes is running
	trimmed uint64 // names the kernel was asked to forget
}

// inodeOverhead is about what an inode costs besides its strings: the
// struct and its slots in the inodes and byKey maps.
var inodeOverhead = int64(unsafe.Sizeof(inode{})) + 96

// trimPause spaces the rounds of a trim: the kernel's forgets come after
// it drops the names.
const trimPause = 100 * time.Millisecond

// inodeBytes is about what in costs.
func inodeBytes(in *inode) int64 {
	return inodeOverhead + int64(len(in.path)) + int64(len(in.obj.version))
}

// chargeLocked counts n more bytes of inodes (fewer, if negative), and
// starts trimming when they are over the limit.
//
// LOCKS_REQUIRED(fs.mu)
func (fs *fileSystem) chargeLocked(n int64) {
	fs.trim.bytes += n
	fs.meta.Charge(n)
	t := &fs.trim
	if t.limit == 0 || t.bytes <= t.limit || t.running || !fs.conn.serving.Load() {
		return
	}
	t.running = true
	go fs.trimInodes()
}

// trimInodes asks the kernel to forget names until the inodes are back
// under three quarters of their limit, waiting trimPause between rounds
// for the kernel's forgets. It stops when nothing can be chosen (every
// file open) and at unmount.
func (fs *fileSystem) trimInodes() {
	for {
		fs.mu.Lock()
		t := &fs.trim
		var victims []kernelEntry
		if t.bytes > t.limit*3/4 {
			victims = fs.trimVictimsLocked(t.bytes - t.limit*3/4)
		}
		if len(victims) == 0 {
			t.running = false
			fs.mu.Unlock()
			return
		}
		fs.mu.Unlock()
		sent := fs.forgetNames(victims)
		fs.mu.Lock()
		t.trimmed += uint64(sent)
		fs.mu.Unlock()
		select {
		case <-time.After(trimPause):
		case <-fs.conn.served:
			fs.mu.Lock()
			t.running = false
			fs.mu.Unlock()
			return
		}
	}
}

// trimVictimsLocked picks files at random whose inodes cost at least n
// bytes, with their parents, for the kernel to forget.
//
// LOCKS_REQUIRED(fs.mu)
func (fs *fileSystem) trimVictimsLocked(n int64) []kernelEntry {
	var kes []kernelEntry
	for id, in := range fs.inodes {
		if n <= 0 {
			break
		}
		if in.dir || id == fuseops.RootInodeID || in.open != nil && (in.open.cachedOpens > 0 || in.open.backing != nil) {
			continue
		}
		dir, name := metadata.SplitPath(in.path)
		parent, ok := fs.byKey[inodeKey{path: dir, dir: true}]
		if !ok {
			continue
		}
		kes = append(kes, kernelEntry{parent: parent, name: name, inode: id})
		n -= inodeBytes(in)
	}
	return kes
}

// forgetNames asks the kernel to drop each name's dentry (not its pages:
// the inode goes with its pages once the kernel evicts it), and returns
// how many it asked. Names it no longer has are skipped; any other
// refusal ends the round.
func (fs *fileSystem) forgetNames(kes []kernelEntry) int {
	sent := 0
	for _, ke := range kes {
		err := fs.conn.notifier.InvalidateEntry(ke.parent, ke.name)
		if err != nil && !errors.Is(err, syscall.ENOENT) {
			fs.log.Debug("fs: kernel refused to forget a name", "name", ke.name, "err", err)
			break
		}
		sent++
	}
	return sent
}
