package fuse

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// gatedServer serves nothing until open is closed; then it reads one op
// and reports what ReadOp returned.
type gatedServer struct {
	conn chan *Connection
	open chan struct{}
	got  chan error
}

func (s *gatedServer) ServeOps(c *Connection) {
	s.conn <- c
	<-s.open
	for {
		ctx, op, err := c.ReadOp()
		if err != nil {
			s.got <- err
			return
		}
		c.Reply(ctx, syscall.ENOSYS) // StatFS and the like, sent by the kernel meanwhile
		_ = op
	}
}

// TestDeviceReadThroughPoller: a mount's device is non-blocking, so that
// an idle connection waits in Go's poller, and a file system unmounted
// while no read waits (the poller has seen the device's hang-up, EPOLLERR,
// before the next read) still ends with io.EOF, not with the poller's
// error, which would make ServeOps panic.
func TestDeviceReadThroughPoller(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	dir := t.TempDir()
	s := &gatedServer{conn: make(chan *Connection, 1), open: make(chan struct{}), got: make(chan error, 1)}
	mfs, err := Mount(dir, s, &MountConfig{FSName: "devreader-test"})
	if err != nil {
		t.Fatal(err)
	}
	unmounted := false
	defer func() {
		if !unmounted {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
		select {
		case <-s.open:
		default:
			close(s.open)
		}
	}()
	c := <-s.conn

	// Non-blocking: O_NONBLOCK in the open file's flags.
	fdinfo, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(int(c.dev.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	var flags uint64
	for _, l := range strings.Split(string(fdinfo), "\n") {
		if v, ok := strings.CutPrefix(l, "flags:"); ok {
			if flags, err = strconv.ParseUint(strings.TrimSpace(v), 8, 64); err != nil {
				t.Fatal(err)
			}
		}
	}
	if flags&unix.O_NONBLOCK == 0 {
		t.Errorf("device flags %o: not O_NONBLOCK", flags)
	}

	// Unmount while nothing reads, and give the poller time to see it.
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	unmounted = true
	time.Sleep(200 * time.Millisecond)
	close(s.open)
	select {
	case err := <-s.got:
		if !errors.Is(err, io.EOF) {
			t.Errorf("ReadOp after the unmount: %v, want io.EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadOp did not return after the unmount")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := mfs.Join(ctx); err != nil {
		t.Errorf("Join: %v", err)
	}
}

// TestDevReaderEOF: a read of nothing (the other end of a socket gone, as
// with FUSE-T) is io.EOF, as os.File.Read reports it, for a blocking and
// a non-blocking descriptor alike.
func TestDevReaderEOF(t *testing.T) {
	for _, nonblock := range []bool{false, true} {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if nonblock {
			syscall.SetNonblock(fds[1], true)
		}
		dev := os.NewFile(uintptr(fds[1]), "dev")
		r := newDevReader(dev)
		peer := os.NewFile(uintptr(fds[0]), "kernel")
		if _, err := peer.Write([]byte("request")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if n, err := r.Read(buf); err != nil || string(buf[:n]) != "request" {
			t.Errorf("nonblock %v: read %q, %v", nonblock, buf[:n], err)
		}
		peer.Close()
		if n, err := r.Read(buf); n != 0 || !errors.Is(err, io.EOF) {
			t.Errorf("nonblock %v: after the peer closed: %d, %v; want 0, io.EOF", nonblock, n, err)
		}
		dev.Close()
	}
}

// TestNonblockingRefused: a file the poller does not take (a regular
// file: epoll refuses it, as it refuses anything once its watches are
// used up) is handed back as it was, blocking, and reads as before.
func TestNonblockingRefused(t *testing.T) {
	p := t.TempDir() + "/f"
	if err := os.WriteFile(p, []byte("request"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g := nonblocking(f)
	if g != f {
		t.Errorf("nonblocking gave a new file for one the poller refuses")
	}
	flags, err := unix.FcntlInt(g.Fd(), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if flags&unix.O_NONBLOCK != 0 {
		t.Errorf("flags %o: left O_NONBLOCK", flags)
	}
	buf := make([]byte, 64)
	if n, err := newDevReader(g).Read(buf); err != nil || string(buf[:n]) != "request" {
		t.Errorf("read %q, %v", buf[:n], err)
	}
}
