// Tests of ferry's patch: spliced read replies and
// FUSE_DIRECT_IO_ALLOW_MMAP (see FERRY.md), against a fake kernel on a
// socket pair, in the kernel's wire format.

package fuse

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jacobsa/fuse/fuseops"
	"golang.org/x/sys/unix"
)

const (
	opRead = 15
	// FUSE_DIRECT_IO_ALLOW_MMAP is bit 36 of the 64-bit flags: bit 4 of
	// flags2.
	fuseDirectIOAllowMmapFlags2 = 1 << 4
)

func TestInitGrantsDirectIOAllowMmap(t *testing.T) {
	cfg := MountConfig{EnablePassthrough: true, DisableWritebackCaching: true, EnableDirectIOAllowMmap: true}
	both := uint32(fusePassthroughFlags2 | fuseDirectIOAllowMmapFlags2)
	c, out := negotiate(t, cfg, initRequest(45, fuseInitExt, true, both))
	if !c.DirectIOAllowMmap() || !c.Passthrough() {
		t.Errorf("DirectIOAllowMmap() %v, Passthrough() %v; want both", c.DirectIOAllowMmap(), c.Passthrough())
	}
	if out.flags&fuseInitExt == 0 || out.flags2 != both {
		t.Errorf("reply flags %#x, flags2 %#x; want FUSE_INIT_EXT and %#x", out.flags, out.flags2, both)
	}

	// Alone, without passthrough: FUSE_INIT_EXT still set.
	cfg = MountConfig{EnableDirectIOAllowMmap: true}
	c, out = negotiate(t, cfg, initRequest(45, fuseInitExt, true, both))
	if !c.DirectIOAllowMmap() || c.Passthrough() {
		t.Errorf("DirectIOAllowMmap() %v, Passthrough() %v; want true, false", c.DirectIOAllowMmap(), c.Passthrough())
	}
	if out.flags&fuseInitExt == 0 || out.flags2 != fuseDirectIOAllowMmapFlags2 || out.maxStackDepth != 0 {
		t.Errorf("reply flags %#x, flags2 %#x, max_stack_depth %d", out.flags, out.flags2, out.maxStackDepth)
	}

	for name, req := range map[string][]byte{
		"kernel without it":       initRequest(45, fuseInitExt, true, 0),
		"flags2 without INIT_EXT": initRequest(45, 0, true, fuseDirectIOAllowMmapFlags2),
		"kernel before 7.36":      initRequest(34, 0, false, 0),
	} {
		c, out = negotiate(t, cfg, req)
		if c.DirectIOAllowMmap() || out.flags2 != 0 {
			t.Errorf("%s: DirectIOAllowMmap() %v, reply flags2 %#x; want false, 0", name, c.DirectIOAllowMmap(), out.flags2)
		}
	}
	c, out = negotiate(t, MountConfig{}, initRequest(45, fuseInitExt, true, fuseDirectIOAllowMmapFlags2))
	if c.DirectIOAllowMmap() || out.flags2 != 0 {
		t.Errorf("not asked: DirectIOAllowMmap() %v, reply flags2 %#x; want false, 0", c.DirectIOAllowMmap(), out.flags2)
	}
}

// readRequest is a FUSE_READ request: struct fuse_in_header, then
// struct fuse_read_in (fh, offset, size, read_flags, lock_owner, flags,
// padding).
func readRequest(unique, fh uint64, off int64, size uint32) []byte {
	b := make([]byte, inHeaderLen+40)
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(len(b)))
	le.PutUint32(b[4:], opRead)
	le.PutUint64(b[8:], unique)
	le.PutUint64(b[16:], 2) // nodeid
	r := b[inHeaderLen:]
	le.PutUint64(r[0:], fh)
	le.PutUint64(r[8:], uint64(off))
	le.PutUint32(r[16:], size)
	return b
}

// spliceRead has the fake kernel send a read, answers it from f at foff
// with n bytes, and returns the reply the kernel got. The reply goes to a
// pipe, not to the socket: splicing to a socket may cut the reply into
// several messages, which /dev/fuse never does.
func spliceRead(t *testing.T, c *Connection, kernel *os.File, unique uint64, f *os.File, foff int64, n int, fallback func([]byte) (int, error)) []byte {
	t.Helper()
	if _, err := kernel.Write(readRequest(unique, 7, foff, uint32(n))); err != nil {
		t.Fatal(err)
	}
	ctx, op, err := c.ReadOp()
	if err != nil {
		t.Fatal(err)
	}
	o, ok := op.(*fuseops.ReadFileOp)
	if !ok || o.Handle != 7 || o.Offset != foff || o.Size != int64(n) {
		t.Fatalf("op %#v", op)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	// Room for the whole reply: a pipe, unlike /dev/fuse, may take part
	// of it. A process that may not make 4 MiB pipes makes none over 1
	// MiB for replies either.
	if _, err := unix.FcntlInt(pw.Fd(), unix.F_SETPIPE_SZ, 4<<20); err != nil {
		if _, err := unix.FcntlInt(pw.Fd(), unix.F_SETPIPE_SZ, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(pr)
		got <- b
	}()
	dev := c.dev
	c.dev = pw
	called := false
	o.SpliceFile, o.SpliceOff, o.BytesRead = f, foff, n
	o.SpliceFallback = fallback
	o.Callback = func() { called = true }
	err = c.Reply(ctx, nil)
	c.dev = dev
	if err != nil {
		t.Fatal(err)
	}
	if !called {
		t.Error("Callback did not run")
	}
	pw.Close()
	reply := <-got
	return reply
}

func TestReadReplySpliced(t *testing.T) {
	c, kernel, _ := connect(t, MountConfig{}, initRequest(45, 0, false, 0))
	data := make([]byte, 3<<20)
	rand.New(rand.NewSource(1)).Read(data)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	le := binary.LittleEndian
	for i, tc := range []struct {
		off int64
		n   int
	}{
		{0, 4096}, {1, 1}, {12345, 100000}, {4096, 1 << 20}, {4095, 1 << 20},
		{3<<20 - 10, 10}, {8192, 1<<20 - 4096},
	} {
		unique := uint64(100 + i)
		reply := spliceRead(t, c, kernel, unique, f, tc.off, tc.n, nil)
		if len(reply) != outHdrLen+tc.n {
			t.Fatalf("read of %d at %d: reply of %d bytes", tc.n, tc.off, len(reply))
		}
		if l, e, u := le.Uint32(reply[0:]), int32(le.Uint32(reply[4:])), le.Uint64(reply[8:]); int(l) != len(reply) || e != 0 || u != unique {
			t.Errorf("read of %d at %d: header len %d, error %d, unique %d", tc.n, tc.off, l, e, u)
		}
		if !bytes.Equal(reply[outHdrLen:], data[tc.off:tc.off+int64(tc.n)]) {
			t.Errorf("read of %d at %d: wrong bytes", tc.n, tc.off)
		}
	}
	// All but the 1 MiB reads fit a 1 MiB pipe (header and 255 pages);
	// those fit the 2 MiB pipes of a process that may make them.
	if got := c.Spliced(); got < 4 {
		t.Errorf("%d replies spliced, want at least 4", got)
	}
	if len(c.pipes) == 0 {
		t.Error("no pipe kept for the next reply")
	}

	// Bytes the file does not have: neither splice nor copy can send
	// them. The fallback's bytes are sent; without one the read fails
	// rather than send short or stale bytes.
	spliced := c.Spliced()
	reply := spliceRead(t, c, kernel, 200, f, 3<<20-100, 4096, nil)
	if len(reply) != outHdrLen || int32(le.Uint32(reply[4:])) != -int32(syscall.EIO) || le.Uint64(reply[8:]) != 200 {
		t.Errorf("read past the file's end: reply %d bytes, error %d; want EIO alone", len(reply), int32(le.Uint32(reply[4:])))
	}
	other := bytes.Repeat([]byte{7}, 4096)
	calls := 0
	reply = spliceRead(t, c, kernel, 202, f, 3<<20-100, 4096, func(p []byte) (int, error) {
		calls++
		return copy(p, other), nil
	})
	if calls != 1 || len(reply) != outHdrLen+4096 || int32(le.Uint32(reply[4:])) != 0 || !bytes.Equal(reply[outHdrLen:], other) {
		t.Errorf("fallback: %d calls, reply %d bytes, error %d, or wrong bytes", calls, len(reply), int32(le.Uint32(reply[4:])))
	}
	reply = spliceRead(t, c, kernel, 203, f, 3<<20-100, 4096, func(p []byte) (int, error) {
		return 10, io.ErrUnexpectedEOF
	})
	if len(reply) != outHdrLen || int32(le.Uint32(reply[4:])) != -int32(syscall.EIO) {
		t.Errorf("failed fallback: reply %d bytes, error %d; want EIO alone", len(reply), int32(le.Uint32(reply[4:])))
	}
	if c.Spliced() != spliced {
		t.Error("a reply the file could not supply counted as spliced")
	}

	// With no pipe to be had, the bytes are copied.
	c.closePipes()
	spliced = c.Spliced()
	held := pipesOpen.Swap(maxPipes)
	reply = spliceRead(t, c, kernel, 201, f, 777, 70000, nil)
	pipesOpen.Add(held - maxPipes)
	if c.Spliced() != spliced {
		t.Error("spliced without a pipe")
	}
	if len(reply) != outHdrLen+70000 || int32(le.Uint32(reply[4:])) != 0 || !bytes.Equal(reply[outHdrLen:], data[777:777+70000]) {
		t.Errorf("copied reply: %d bytes, error %d, or wrong bytes", len(reply), int32(le.Uint32(reply[4:])))
	}
}

// After a pipe big enough was refused, none is tried for a while; then
// pipes are made again.
func TestNoPipesForAWhile(t *testing.T) {
	c := &Connection{pipes: make(chan *splicePipe, maxFreePipes)}
	defer c.closePipes()
	c.noPipesUntil.Store(time.Now().Add(time.Hour).UnixNano())
	if p := c.getPipe(); p != nil {
		t.Fatal("a pipe while refused")
	}
	c.noPipesUntil.Store(time.Now().Add(-time.Second).UnixNano())
	p := c.getPipe()
	if p == nil {
		t.Fatal("no pipe after the pause")
	}
	if p.slots*unix.Getpagesize() < minPipeSize {
		t.Errorf("a pipe of %d pages", p.slots)
	}
	c.putPipe(p, true)
}
