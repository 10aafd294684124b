package fs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// An interrupt cancels an op only when its caller is quitting.
//
// The kernel sends FUSE_INTERRUPT for any signal that reaches a thread
// waiting for ferry, also one the program handles and carries on after.
// Cancelling then fails the open, stat or read with EINTR, which the
// kernel does not restart, where a local disk would have finished it: a
// C program with a timer (git's progress display), a profiler's SIGPROF,
// a SIGCHLD handler (PyTorch's DataLoader installs one), a Go program's
// runtime preempting with SIGURG a thread in a raw system call. Go's os
// package and Python retry, but few C programs retry an open a local
// disk never interrupts (jacobsa/fuse#122; gcsfuse added
// `--ignore-interrupts` for it). Ignoring every interrupt instead leaves
// a killed program waiting for the store.
//
// So an interrupt cancels only when /proc/TID/status shows the caller
// quitting:
//   - SIGKILL pending: killed, or ended by a fatal signal it does not
//     handle (the kernel makes such a signal, Ctrl-C's SIGINT for one, a
//     SIGKILL for every thread);
//   - a core-dumping signal pending that it neither handles nor ignores;
//   - SIGINT or SIGTERM pending, handled or not: a request to stop. A
//     program that handles it to stop gracefully gets EINTR at once
//     rather than after the store (Python raises KeyboardInterrupt); Go
//     and Python retry if it carries on. Not SIGHUP or SIGQUIT: daemons
//     handle SIGHUP to reload, Java SIGQUIT to print its threads, and
//     carry on; not handled, both end the caller and count above.
//
// Under a debugger (TracerPid) only SIGKILL counts: the debugger may
// swallow the signal. A caller that is not quitting waits for the op as
// it would for a disk; the store's timeouts and retries bound the wait.
//
// The kernel sends one interrupt per request, so an op whose caller is
// not quitting yet is watched until it ends: a program killed later
// (Ctrl-C after a handled signal) still has its op cancelled within
// interruptPoll.

// interruptPoll is how often an interrupted op's caller is looked at again.
const interruptPoll = 100 * time.Millisecond

// interruptState counts the FUSE interrupts of ops in flight, and those
// that cancelled their op because the caller was quitting.
type interruptState struct {
	count, cancelled atomic.Uint64
	looks            atomic.Uint64 // times an interrupted caller was looked at
	blindLogged      atomic.Bool
}

// interrupted is the mount's MountConfig.OnInterrupt: tid is the caller's
// thread, cancel cancels the op and done closes when it ends. It must not
// block: it runs on the goroutine that reads the kernel's requests.
func (fs *fileSystem) interrupted(tid uint32, cancel func(), done <-chan struct{}) {
	fs.intr.count.Add(1)
	if tid == 0 {
		// The caller is outside the pid namespace of the mount (or the
		// kernel sent no credentials): nothing says whether it is
		// quitting, and failing a live caller is worse than making a
		// killed one wait for the store.
		fs.interruptBlind("the kernel gave no thread id (the caller is outside the pid namespace ferry mounted in)")
		return
	}
	go func() {
		t := time.NewTicker(interruptPoll)
		defer t.Stop()
		for {
			quitting, err := threadQuitting(tid)
			fs.intr.looks.Add(1)
			if err != nil {
				fs.interruptBlind(err.Error())
				return
			}
			if quitting {
				fs.intr.cancelled.Add(1)
				cancel()
				return
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
}

// interruptBlind logs, once a mount, that an interrupted caller could not
// be looked at, so that its op went on.
func (fs *fileSystem) interruptBlind(why string) {
	if !fs.intr.blindLogged.Swap(true) {
		fs.log.Warn("fs: cannot tell whether an interrupted caller is quitting; its request goes on until the store answers, even if the caller was killed (logged once)", "why", why)
	}
}

// threadQuitting reads /proc/TID/status and says whether the thread has
// a signal pending that ends or stops its process (statusQuitting).
func threadQuitting(tid uint32) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return false, err
	}
	return statusQuitting(b)
}

// sigBit is signal s as a bit of /proc/PID/status's masks.
func sigBit(s unix.Signal) uint64 { return 1 << (s - 1) }

var (
	// Requests to stop, which cancel whether handled or not.
	sigStopRequests = sigBit(unix.SIGINT) | sigBit(unix.SIGTERM)
	// Signals whose default action does not end the process: SIGCHLD,
	// SIGCONT, SIGURG and SIGWINCH are ignored, SIGSTOP, SIGTSTP, SIGTTIN
	// and SIGTTOU stop it.
	sigHarmless = sigBit(unix.SIGCHLD) | sigBit(unix.SIGCONT) | sigBit(unix.SIGURG) | sigBit(unix.SIGWINCH) |
		sigBit(unix.SIGSTOP) | sigBit(unix.SIGTSTP) | sigBit(unix.SIGTTIN) | sigBit(unix.SIGTTOU)
)

// statusQuitting reads a /proc/PID/status text: the thread is quitting
// if it or its process has SIGKILL pending; unless it is traced, also if
// it has a request to stop pending (SIGINT, SIGTERM) it does not block or
// ignore, or any signal pending that it does not block,
// handle or ignore and whose default action ends the process (the
// core-dumping ones: the kernel turns the others into SIGKILL at once).
func statusQuitting(status []byte) (bool, error) {
	fields := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		name, value, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		base := 16
		switch k := string(name); k {
		case "TracerPid":
			base = 10
			fallthrough
		case "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt":
			v, err := strconv.ParseUint(string(bytes.TrimSpace(value)), base, 64)
			if err != nil {
				return false, fmt.Errorf("status %s: %w", k, err)
			}
			fields[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	for _, k := range []string{"TracerPid", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"} {
		if _, ok := fields[k]; !ok {
			return false, fmt.Errorf("status has no %s", k)
		}
	}
	pending := fields["SigPnd"] | fields["ShdPnd"]
	if pending&sigBit(unix.SIGKILL) != 0 {
		return true, nil
	}
	if fields["TracerPid"] != 0 {
		return false, nil
	}
	live := pending &^ (fields["SigBlk"] | fields["SigIgn"])
	return live&sigStopRequests != 0 || live&^(fields["SigCgt"]|sigHarmless) != 0, nil
}
