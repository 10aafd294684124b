package file

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// A ranged reader knows where its range ends; the kernel does not. Read
// 64 KiB at a time (readahead's cache blocks), a range looks to the
// kernel like the start of a sequential read, and its readahead reads up
// to read_ahead_kb (8 MiB on some disks) past the range's end: a reader
// of sparse random ranges in a large object reads from the disk three
// times what it asked for (1 MiB read this way brought 3.3 MiB in). So
// the reader turns the kernel's readahead off for its descriptor
// (POSIX_FADV_RANDOM) and asks for the pages of its range itself
// (POSIX_FADV_WILLNEED), as far ahead as the kernel would have read and
// never past the end, so a long range still has its reads in flight.

// adviseRandom turns the kernel's readahead off for f: a read then brings
// in only the pages it copies, and the reader advises the rest.
func adviseRandom(f *os.File) {
	fadvise(f, 0, 0, unix.FADV_RANDOM)
}

// fadvise is posix_fadvise on f. Its error is dropped: advice changes
// what the kernel reads ahead, never what a read returns.
func fadvise(f *os.File, off, n int64, advice int) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) { _ = unix.Fadvise(int(fd), off, n, advice) })
}

// advise asks the kernel for the range's pages up to upTo, in calls of
// at most r.ahead (the kernel reads at most max(read_ahead_kb, the
// device's largest request) per call).
func (r *reader) advise(upTo int64) {
	for r.advised < upTo {
		n := min(upTo-r.advised, r.ahead)
		fadvise(r.f, r.advised, n, unix.FADV_WILLNEED)
		r.advised += n
	}
}

// defaultAhead is the kernel's own default readahead (VM_READAHEAD_PAGES),
// for a device whose setting cannot be read.
const defaultAhead = 128 << 10

// readAheads maps a device to its read_ahead_kb in bytes: how far ahead
// of a read a ranged reader advises. Looked up once per device.
type readAheads struct {
	mu  sync.Mutex
	dev map[uint64]int64 // GUARDED_BY(mu)
}

// of returns dev's readahead, from /sys/class/bdi/MAJ:MIN/read_ahead_kb
// (defaultAhead if that cannot be read; 0 if readahead is off there, and
// then the reader advises nothing either).
func (a *readAheads) of(dev uint64) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n, ok := a.dev[dev]; ok {
		return n
	}
	if a.dev == nil {
		a.dev = map[uint64]int64{}
	}
	n := int64(defaultAhead)
	path := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(dev), unix.Minor(dev))
	if b, err := os.ReadFile(path); err == nil {
		if kb, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && kb >= 0 {
			n = kb << 10
		}
	}
	a.dev[dev] = n
	return n
}
