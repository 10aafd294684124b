// Tests of ferry's patch: FUSE passthrough (see FERRY.md). They speak the
// kernel's wire format, with offsets taken from include/uapi/linux/fuse.h,
// so that a layout mistake in fusekernel cannot cancel itself out.

package fuse

import (
	"context"
	"encoding/binary"
	"os"
	"syscall"
	"testing"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/jacobsa/fuse/internal/buffer"
)

const (
	opInit      = 26
	inHeaderLen = 40
	outHdrLen   = 16
	// struct fuse_init_in: major, minor, max_readahead, flags, then from
	// 7.36 flags2 and eleven unused words.
	initInLen    = 16
	initInExtLen = 48
	fuseInitExt  = 1 << 30
	// FUSE_PASSTHROUGH is bit 37 of the 64-bit flags: bit 5 of flags2.
	fusePassthroughFlags2 = 1 << 5
	fuseAsyncRead         = 1 << 0
)

// initRequest is a FUSE_INIT request as a kernel of protocol 7.minor with
// these flags sends it; ext adds flags2 (7.36 on).
func initRequest(minor, flags uint32, ext bool, flags2 uint32) []byte {
	n := inHeaderLen + initInLen
	if ext {
		n += initInExtLen
	}
	b := make([]byte, n)
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(n))
	le.PutUint32(b[4:], opInit)
	le.PutUint64(b[8:], 1) // unique
	le.PutUint32(b[inHeaderLen+0:], 7)
	le.PutUint32(b[inHeaderLen+4:], minor)
	le.PutUint32(b[inHeaderLen+8:], 1<<20)
	le.PutUint32(b[inHeaderLen+12:], flags)
	if ext {
		le.PutUint32(b[inHeaderLen+16:], flags2)
	}
	return b
}

// initOut is the part of struct fuse_init_out these tests look at.
type initOut struct {
	minor, flags, flags2, maxStackDepth uint32
	maxBackground, congestionThreshold  uint16
}

// negotiate runs Connection.Init against a fake kernel that sends req and
// returns the connection and the reply it got.
func negotiate(t *testing.T, cfg MountConfig, req []byte) (*Connection, initOut) {
	t.Helper()
	c, kernel, out := connect(t, cfg, req)
	kernel.Close()
	return c, out
}

// connect is negotiate that also returns the fake kernel's end of the
// connection (closed at the test's end).
func connect(t *testing.T, cfg MountConfig, req []byte) (*Connection, *os.File, initOut) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	kernel := os.NewFile(uintptr(fds[0]), "kernel")
	t.Cleanup(func() { kernel.Close() })
	if _, err := kernel.Write(req); err != nil {
		t.Fatal(err)
	}
	cfg.OpContext = context.Background()
	if cfg.MaxPages == 0 {
		cfg.MaxPages = 256
	}
	c, err := newConnection(cfg, nil, nil, nil, os.NewFile(uintptr(fds[1]), "dev"))
	if err != nil {
		t.Fatalf("newConnection: %v", err)
	}
	t.Cleanup(func() { c.close() })
	reply := make([]byte, 4096)
	n, err := kernel.Read(reply)
	if err != nil {
		t.Fatal(err)
	}
	reply = reply[:n]
	le := binary.LittleEndian
	if got := le.Uint32(reply[0:]); int(got) != n {
		t.Fatalf("reply header says %d bytes, read %d", got, n)
	}
	if e := int32(le.Uint32(reply[4:])); e != 0 {
		t.Fatalf("init answered with error %d", e)
	}
	// struct fuse_init_out is 64 bytes: flags2 at 32, max_stack_depth at 36.
	if n != outHdrLen+64 {
		t.Fatalf("init reply is %d bytes, want %d", n, outHdrLen+64)
	}
	o := reply[outHdrLen:]
	return c, kernel, initOut{
		minor:         le.Uint32(o[4:]),
		flags:         le.Uint32(o[12:]),
		flags2:        le.Uint32(o[32:]),
		maxStackDepth: le.Uint32(o[36:]),
		// max_background and congestion_threshold follow flags.
		maxBackground:       le.Uint16(o[16:]),
		congestionThreshold: le.Uint16(o[18:]),
	}
}

func TestInitGrantsPassthroughWhenAskedAndOffered(t *testing.T) {
	cfg := MountConfig{EnablePassthrough: true, DisableWritebackCaching: true}
	c, out := negotiate(t, cfg, initRequest(45, fuseInitExt|fuseAsyncRead, true, fusePassthroughFlags2))
	if !c.Passthrough() {
		t.Error("Passthrough() = false, want true")
	}
	if out.flags&fuseInitExt == 0 {
		t.Errorf("reply flags %#x lack FUSE_INIT_EXT", out.flags)
	}
	if out.flags2 != fusePassthroughFlags2 {
		t.Errorf("reply flags2 = %#x, want %#x", out.flags2, fusePassthroughFlags2)
	}
	if out.maxStackDepth != 1 {
		t.Errorf("max_stack_depth = %d, want 1", out.maxStackDepth)
	}
}

func TestInitWithoutPassthrough(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  MountConfig
		req  []byte
	}{
		{"not asked", MountConfig{DisableWritebackCaching: true},
			initRequest(45, fuseInitExt, true, fusePassthroughFlags2)},
		{"writeback cache", MountConfig{EnablePassthrough: true},
			initRequest(45, fuseInitExt, true, fusePassthroughFlags2)},
		{"kernel without it", MountConfig{EnablePassthrough: true, DisableWritebackCaching: true},
			initRequest(45, fuseInitExt, true, 0)},
		{"kernel before 7.36", MountConfig{EnablePassthrough: true, DisableWritebackCaching: true},
			initRequest(34, 0, false, 0)},
		// flags2 is only meaningful with FUSE_INIT_EXT in flags.
		{"flags2 without INIT_EXT", MountConfig{EnablePassthrough: true, DisableWritebackCaching: true},
			initRequest(45, 0, true, fusePassthroughFlags2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, out := negotiate(t, tc.cfg, tc.req)
			if c.Passthrough() {
				t.Error("Passthrough() = true, want false")
			}
			if out.flags2 != 0 || out.maxStackDepth != 0 {
				t.Errorf("reply flags2 %#x, max_stack_depth %d; want 0, 0", out.flags2, out.maxStackDepth)
			}
		})
	}
}

// struct fuse_open_out: fh (u64), open_flags (u32), backing_id (s32).
func openOut(t *testing.T, op *fuseops.OpenFileOp) (fh uint64, flags uint32, backingID int32) {
	t.Helper()
	var m buffer.OutMessage
	m.Reset()
	c := &Connection{}
	c.kernelResponseForOp(&m, op)
	var b []byte
	for _, s := range m.Sglist {
		b = append(b, s...)
	}
	if len(b) != outHdrLen+16 {
		t.Fatalf("open reply is %d bytes, want %d", len(b), outHdrLen+16)
	}
	le := binary.LittleEndian
	o := b[outHdrLen:]
	return le.Uint64(o[0:]), le.Uint32(o[8:]), int32(le.Uint32(o[12:]))
}

func TestOpenReplyNamesBackingFile(t *testing.T) {
	const fopenPassthrough = 1 << 7
	fh, flags, id := openOut(t, &fuseops.OpenFileOp{Handle: 9, BackingID: 3})
	if fh != 9 || flags != fopenPassthrough || id != 3 {
		t.Errorf("passthrough open: fh %d, open_flags %#x, backing_id %d; want 9, %#x, 3", fh, flags, id, fopenPassthrough)
	}
	fh, flags, id = openOut(t, &fuseops.OpenFileOp{Handle: 9, KeepPageCache: true})
	if fh != 9 || flags&fopenPassthrough != 0 || id != 0 {
		t.Errorf("plain open: fh %d, open_flags %#x, backing_id %d; want no passthrough", fh, flags, id)
	}
}

// TestInitSetsMaxBackground: MountConfig.MaxBackground reaches the kernel
// in FUSE_INIT, with a congestion threshold of 3/4 of it; unset, the
// kernel gets upstream's 12 and 9.
func TestInitSetsMaxBackground(t *testing.T) {
	for _, tc := range []struct {
		set, wantMax, wantCong uint16
	}{{0, 12, 9}, {64, 64, 48}, {1, 1, 1}, {65535, 65535, 49151}} {
		_, out := negotiate(t, MountConfig{MaxBackground: tc.set}, initRequest(45, fuseInitExt, true, 0))
		if out.maxBackground != tc.wantMax || out.congestionThreshold != tc.wantCong {
			t.Errorf("MaxBackground %d: max_background %d, congestion_threshold %d; want %d, %d",
				tc.set, out.maxBackground, out.congestionThreshold, tc.wantMax, tc.wantCong)
		}
	}
}
