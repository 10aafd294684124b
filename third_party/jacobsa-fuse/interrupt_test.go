// Tests of ferry's patch: MountConfig.OnInterrupt (see FERRY.md), with a
// fake kernel on a socket pair speaking the wire format of
// include/uapi/linux/fuse.h.

package fuse

import (
	"context"
	"encoding/binary"
	"os"
	"testing"
)

const opInterrupt = 36

// interruptRequest is a FUSE_INTERRUPT of the request numbered target:
// struct fuse_in_header, then struct fuse_interrupt_in (unique).
func interruptRequest(unique, target uint64) []byte {
	b := make([]byte, inHeaderLen+8)
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(len(b)))
	le.PutUint32(b[4:], opInterrupt)
	le.PutUint64(b[8:], unique)
	le.PutUint64(b[inHeaderLen:], target)
	return b
}

// readFrom is readRequest from the caller with thread id pid (the
// header's pid, at byte 32).
func readFrom(unique uint64, pid uint32) []byte {
	b := readRequest(unique, 7, 0, 4096)
	binary.LittleEndian.PutUint32(b[32:], pid)
	return b
}

// interruptOne has the fake kernel send a read from pid, interrupt it and
// send one more read, and returns the first read's context: the
// interrupt has been handled by the time ReadOp returns the second.
func interruptOne(t *testing.T, c *Connection, kernel *os.File, pid uint32) context.Context {
	t.Helper()
	send := func(b []byte) {
		t.Helper()
		if _, err := kernel.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	send(readFrom(10, pid))
	ctx, _, err := c.ReadOp()
	if err != nil {
		t.Fatal(err)
	}
	send(interruptRequest(11, 10))
	send(readFrom(12, pid))
	if _, _, err := c.ReadOp(); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// Without OnInterrupt an interrupt cancels the op's context at once, as
// upstream does.
func TestInterruptCancels(t *testing.T) {
	c, kernel, _ := connect(t, MountConfig{}, initRequest(45, 0, false, 0))
	ctx := interruptOne(t, c, kernel, 4242)
	if ctx.Err() == nil {
		t.Error("an interrupted op's context is not cancelled")
	}
}

// With OnInterrupt the server is told the caller's thread id and decides:
// the op's context stays live until it calls cancel, and done is the
// context's Done.
func TestOnInterruptDecides(t *testing.T) {
	type call struct {
		pid    uint32
		cancel func()
		done   <-chan struct{}
	}
	calls := make(chan call, 2)
	cfg := MountConfig{OnInterrupt: func(pid uint32, cancel func(), done <-chan struct{}) {
		calls <- call{pid, cancel, done}
	}}
	c, kernel, _ := connect(t, cfg, initRequest(45, 0, false, 0))
	ctx := interruptOne(t, c, kernel, 4242)
	var got call
	select {
	case got = <-calls:
	default:
		t.Fatal("OnInterrupt was not called")
	}
	if got.pid != 4242 {
		t.Errorf("OnInterrupt got pid %d, want 4242", got.pid)
	}
	if ctx.Err() != nil {
		t.Fatal("the op's context was cancelled before OnInterrupt's cancel")
	}
	if got.done != ctx.Done() {
		t.Error("done is not the op's context's Done")
	}
	got.cancel()
	if ctx.Err() == nil {
		t.Error("OnInterrupt's cancel did not cancel the op's context")
	}
	select {
	case <-calls:
		t.Error("OnInterrupt called twice for one interrupt")
	default:
	}
}
