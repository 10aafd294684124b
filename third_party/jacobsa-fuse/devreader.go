package fuse

import (
	"io"
	"os"
	"syscall"
)

// devReader reads requests from the device. Where the device is
// non-blocking (mount_linux.go's nonblocking), a read that finds no
// request waits in Go's poller, which parks the goroutine and frees its
// thread, instead of in read(2). Elsewhere it reads with a blocking
// read(2), and like os.File.Read reports a read of nothing as io.EOF.
//
// It reads through the file's RawConn, not os.File.Read, because of how
// the poller reports a hung-up device: /dev/fuse answers poll with only
// EPOLLERR once the file system is unmounted, and an error event that
// arrives while no read waits makes the poller fail the next read with an
// error of its own ("not pollable"), before read(2) is even tried. The
// connection must see the device's ENODEV instead, which ends it cleanly
// (readMessage), so on a poller error the device itself is asked once.
type devReader struct {
	rc syscall.RawConn
}

func newDevReader(dev *os.File) io.Reader {
	rc, err := dev.SyscallConn()
	if err != nil {
		return dev
	}
	return devReader{rc}
}

func (r devReader) Read(p []byte) (int, error) {
	var n int
	var errno error
	err := r.rc.Read(func(fd uintptr) bool {
		n, errno = syscall.Read(int(fd), p)
		return errno != syscall.EAGAIN
	})
	if err != nil {
		// Not the device's answer: ask it.
		if cerr := r.rc.Control(func(fd uintptr) { n, errno = syscall.Read(int(fd), p) }); cerr != nil {
			return 0, err
		}
		if errno == syscall.EAGAIN {
			return 0, err
		}
	}
	if errno != nil {
		return 0, &os.PathError{Op: "read", Path: "/dev/fuse", Err: errno}
	}
	if n == 0 {
		return 0, io.EOF // as os.File.Read: the other end is gone
	}
	return n, nil
}
