package fs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// An interrupt cancels an op only when its caller is dying.
//
// The kernel sends FUSE_INTERRUPT for any signal that reaches a thread
// waiting for ferry, also one the program handles and would have its
// system call restarted after (SA_RESTART) on a local disk. Cancelling
// then fails the open, stat or read with EINTR, which the kernel does not
// restart: a Go program gets such a signal whenever its runtime preempts a
// goroutine (SIGURG), git from its progress timer, a profiled trainer
// from SIGPROF. Few programs retry an open a local disk never interrupts
// (gcsfuse added `--ignore-interrupts` for this reason). So, as NFS has
// since Linux 2.6.25, only a signal that ends the caller cancels: the
// caller's thread then has SIGKILL pending (the kernel turns an unhandled
// fatal signal, such as Ctrl-C's SIGINT, into one for every thread), or a
// pending core-dumping signal it does not handle. A caller that survives
// the signal waits for the op as it would for a disk; the store's
// timeouts and retries bound the wait.
//
// The kernel sends one interrupt per request, so an op whose caller is
// not dying yet is watched until it ends: a program killed later (Ctrl-C
// after a handled signal) still has its op cancelled within
// interruptPoll.

// interruptPoll is how often an interrupted op's caller is looked at again.
const interruptPoll = 100 * time.Millisecond

// interrupted is the mount's MountConfig.OnInterrupt: tid is the caller's
// thread, cancel cancels the op and done closes when it ends. It must not
// block: it runs on the goroutine that reads the kernel's requests.
func (fs *fileSystem) interrupted(tid uint32, cancel func(), done <-chan struct{}) {
	fs.interrupts.Add(1)
	if tid == 0 {
		// The caller is outside ferry's pid namespace: nothing says
		// whether it is dying, and failing a live caller is worse than
		// making a dying one wait for the store.
		fs.log.Debug("fs: interrupt from a caller outside ferry's pid namespace; the op goes on")
		return
	}
	go func() {
		t := time.NewTicker(interruptPoll)
		defer t.Stop()
		for {
			dying, err := threadDying(tid)
			fs.interruptLooks.Add(1)
			if err != nil {
				fs.log.Debug("fs: cannot tell whether an interrupted caller is dying; the op goes on", "tid", tid, "err", err)
				return
			}
			if dying {
				fs.interruptsCancelled.Add(1)
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

// threadDying reads /proc/TID/status and says whether the thread has a
// signal pending that will end its process (signalDying).
func threadDying(tid uint32) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return false, err
	}
	return signalDying(b)
}

// Signal numbers as bits of /proc/PID/status's masks (signal n is bit
// n-1).
const (
	sigKill = 1 << (9 - 1)
	// Signals whose default action does not end the process: SIGCHLD,
	// SIGCONT, SIGURG, SIGWINCH ignore; SIGSTOP, SIGTSTP, SIGTTIN,
	// SIGTTOU stop.
	sigHarmless = 1<<(17-1) | 1<<(18-1) | 1<<(23-1) | 1<<(28-1) |
		1<<(19-1) | 1<<(20-1) | 1<<(21-1) | 1<<(22-1)
)

// signalDying reads a /proc/PID/status text: the thread is dying if it or
// its process has SIGKILL pending, or a signal pending that it does not
// block, catch or ignore and whose default action ends the process (the
// core-dumping ones: the kernel turns the others into SIGKILL at once).
func signalDying(status []byte) (bool, error) {
	masks := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		name, value, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		switch k := string(name); k {
		case "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt":
			m, err := strconv.ParseUint(string(bytes.TrimSpace(value)), 16, 64)
			if err != nil {
				return false, fmt.Errorf("status %s: %w", k, err)
			}
			masks[k] = m
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	for _, k := range []string{"SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"} {
		if _, ok := masks[k]; !ok {
			return false, fmt.Errorf("status has no %s", k)
		}
	}
	pending := masks["SigPnd"] | masks["ShdPnd"]
	if pending&sigKill != 0 {
		return true, nil
	}
	return pending&^(masks["SigBlk"]|masks["SigIgn"]|masks["SigCgt"]|sigHarmless) != 0, nil
}
