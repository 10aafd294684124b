package fs

import (
	"context"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"ferry/bucket"
	"ferry/bucket/mem"
)

// Linux AIO (libaio's io_setup/io_submit/io_getevents) by raw system
// calls: one thread with many reads in flight, as fio's libaio engine,
// DALI or DeepSpeed submit them. include/uapi/linux/aio_abi.h.

// iocb is struct iocb on a little-endian machine (aio_key before
// aio_rw_flags): 64 bytes.
type iocb struct {
	data      uint64
	key       uint32
	rwFlags   uint32
	opcode    uint16
	reqprio   int16
	fildes    uint32
	buf       uint64
	nbytes    uint64
	offset    int64
	reserved2 uint64
	flags     uint32
	resfd     uint32
}

// ioEvent is struct io_event.
type ioEvent struct {
	data, obj uint64
	res, res2 int64
}

const iocbCmdPread = 0

// aioRead is one read for aioPread: n bytes at off.
type aioRead struct {
	off int64
	n   int
}

// aioPread submits every read in rs on fd in one io_submit, waits for
// them all, and returns each one's bytes (as many as it read) or errno.
// The buffers are page-aligned and outside Go's heap (the kernel fills
// them after io_submit returns).
func aioPread(t *testing.T, fd int, rs []aioRead) (got [][]byte, errs []error) {
	t.Helper()
	var ctx uintptr
	_, _, e := unix.Syscall(unix.SYS_IO_SETUP, uintptr(len(rs)), uintptr(unsafe.Pointer(&ctx)), 0)
	require.Zero(t, e, "io_setup")
	defer unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)

	const page = 4096
	total := 0
	for _, r := range rs {
		total += (r.n + page - 1) / page * page
	}
	mem, err := unix.Mmap(-1, 0, max(total, page), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	defer unix.Munmap(mem)

	cbs := make([]iocb, len(rs))
	ptrs := make([]*iocb, len(rs))
	bufs := make([][]byte, len(rs))
	at := 0
	for i, r := range rs {
		bufs[i] = mem[at : at+r.n]
		cbs[i] = iocb{data: uint64(i), opcode: iocbCmdPread, fildes: uint32(fd),
			buf: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(bufs[i])))), nbytes: uint64(r.n), offset: r.off}
		ptrs[i] = &cbs[i]
		at += (r.n + page - 1) / page * page
	}
	n, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, ctx, uintptr(len(rs)), uintptr(unsafe.Pointer(&ptrs[0])))
	require.Zero(t, e, "io_submit")
	require.EqualValues(t, len(rs), n, "io_submit took only some")

	events := make([]ioEvent, len(rs))
	done := 0
	for done < len(rs) {
		ts := unix.Timespec{Sec: 60}
		n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, ctx, 1, uintptr(len(rs)-done),
			uintptr(unsafe.Pointer(&events[done])), uintptr(unsafe.Pointer(&ts)), 0)
		if e == unix.EINTR {
			continue
		}
		require.Zero(t, e, "io_getevents")
		require.NotZero(t, n, "io_getevents: no read completed in 60 s")
		done += int(n)
	}
	got, errs = make([][]byte, len(rs)), make([]error, len(rs))
	for _, ev := range events {
		i := ev.data
		if ev.res < 0 {
			errs[i] = unix.Errno(-ev.res)
			continue
		}
		got[i] = append([]byte{}, bufs[i][:ev.res]...)
	}
	return got, errs
}

// inFlight counts the store's reads in flight, and holds each until
// want are in flight at once or hold has passed: reads the kernel sends
// one at a time then take hold each, and never meet.
type inFlight struct {
	want int
	hold time.Duration

	mu      sync.Mutex
	now     int           // GUARDED_BY(mu)
	most    int           // GUARDED_BY(mu)
	met     chan struct{} // closed when now first reaches want
	metOnce sync.Once
}

func newInFlight(want int, hold time.Duration) *inFlight {
	return &inFlight{want: want, hold: hold, met: make(chan struct{})}
}

// faults are the store faults that count and hold reads.
func (f *inFlight) faults() mem.Faults {
	return mem.Faults{Read: func(ctx context.Context, req *bucket.ReadRequest) error {
		f.mu.Lock()
		f.now++
		f.most = max(f.most, f.now)
		if f.now >= f.want {
			f.metOnce.Do(func() { close(f.met) })
		}
		f.mu.Unlock()
		select {
		case <-f.met:
		case <-time.After(f.hold):
		case <-ctx.Done():
		}
		f.mu.Lock()
		f.now--
		f.mu.Unlock()
		return nil
	}}
}

// peak is the most reads that were in flight at once.
func (f *inFlight) peak() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.most
}
