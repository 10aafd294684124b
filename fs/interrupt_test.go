package fs

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"ferry/bucket"
	"ferry/bucket/mem"
)

// TestSignalDying: which pending signals make a caller dying, from the
// masks of /proc/PID/status.
func TestSignalDying(t *testing.T) {
	bit := func(s syscall.Signal) uint64 { return 1 << (s - 1) }
	type masks struct{ pnd, shd, blk, ign, cgt uint64 }
	status := func(m masks) []byte {
		return fmt.Appendf(nil, "Name:\tcat\nState:\tS (sleeping)\nSigQ:\t1/95162\n"+
			"SigPnd:\t%016x\nShdPnd:\t%016x\nSigBlk:\t%016x\nSigIgn:\t%016x\nSigCgt:\t%016x\n"+
			"CapInh:\t0000000000000000\n", m.pnd, m.shd, m.blk, m.ign, m.cgt)
	}
	// Go's runtime catches every signal it can.
	goCaught := ^(bit(syscall.SIGKILL) | bit(syscall.SIGSTOP))
	for _, tc := range []struct {
		name  string
		m     masks
		dying bool
	}{
		{"nothing pending", masks{}, false},
		{"SIGKILL on the thread", masks{pnd: bit(syscall.SIGKILL)}, true},
		{"SIGKILL on the process", masks{shd: bit(syscall.SIGKILL)}, true},
		{"SIGKILL in a Go program", masks{pnd: bit(syscall.SIGKILL) | bit(syscall.SIGURG), cgt: goCaught}, true},
		{"Go's preemption", masks{pnd: bit(syscall.SIGURG), cgt: goCaught}, false},
		{"SIGQUIT not handled", masks{pnd: bit(syscall.SIGQUIT)}, true},
		{"SIGSEGV on the process", masks{shd: bit(syscall.SIGSEGV)}, true},
		{"SIGQUIT caught", masks{pnd: bit(syscall.SIGQUIT), cgt: bit(syscall.SIGQUIT)}, false},
		{"SIGQUIT blocked", masks{pnd: bit(syscall.SIGQUIT), blk: bit(syscall.SIGQUIT)}, false},
		{"SIGQUIT ignored", masks{shd: bit(syscall.SIGQUIT), ign: bit(syscall.SIGQUIT)}, false},
		{"SIGALRM caught", masks{pnd: bit(syscall.SIGALRM), cgt: bit(syscall.SIGALRM)}, false},
		{"SIGURG by default", masks{pnd: bit(syscall.SIGURG)}, false},
		{"SIGCHLD by default", masks{shd: bit(syscall.SIGCHLD)}, false},
		{"SIGWINCH by default", masks{pnd: bit(syscall.SIGWINCH)}, false},
		{"SIGCONT by default", masks{pnd: bit(syscall.SIGCONT)}, false},
		{"SIGSTOP", masks{shd: bit(syscall.SIGSTOP)}, false},
		{"SIGTSTP by default", masks{shd: bit(syscall.SIGTSTP)}, false},
		{"SIGTTIN by default", masks{pnd: bit(syscall.SIGTTIN)}, false},
		{"SIGTTOU by default", masks{pnd: bit(syscall.SIGTTOU)}, false},
		{"SIGRTMIN+3 by default", masks{pnd: bit(37)}, true},
		{"signal 64 by default", masks{pnd: bit(64)}, true},
	} {
		got, err := signalDying(status(tc.m))
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.dying, got, tc.name)
	}

	_, err := signalDying([]byte("Name:\tcat\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"))
	assert.ErrorContains(t, err, "SigCgt", "a missing mask is an error, not a live caller")
	_, err = signalDying(status(masks{})[:40])
	assert.Error(t, err, "a cut status")
	bad := strings.Replace(string(status(masks{})), "SigPnd:\t0000000000000000", "SigPnd:\tzz", 1)
	_, err = signalDying([]byte(bad))
	assert.ErrorContains(t, err, "SigPnd")

	// This very thread, alive, and a thread that is not there.
	runtime.LockOSThread()
	dying, err := threadDying(uint32(unix.Gettid()))
	runtime.UnlockOSThread()
	require.NoError(t, err)
	assert.False(t, dying)
	_, err = threadDying(1 << 30)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// interruptHelperEnv names the file TestInterruptHelper opens.
const interruptHelperEnv = "FERRY_TEST_INTERRUPT_OPEN"

// TestInterruptHelper is not a test but a caller for the interrupt tests,
// which run this test binary again with $FERRY_TEST_INTERRUPT_OPEN set: it
// catches SIGUSR1 (as a Go program catches SIGURG), prints "tid N" for the
// thread that then opens the file and "open ERR" when the open returns.
func TestInterruptHelper(t *testing.T) {
	path := os.Getenv(interruptHelperEnv)
	if path == "" {
		t.Skip("a caller run by TestInterruptCancelsOnlyDyingCallers")
	}
	signal.Notify(make(chan os.Signal, 1), syscall.SIGUSR1)
	runtime.LockOSThread()
	fmt.Fprintf(os.Stdout, "tid %d\n", unix.Gettid())
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err == nil {
		syscall.Close(fd)
	}
	fmt.Fprintf(os.Stdout, "open %v\n", err)
	os.Exit(0)
}

// caller is a child process opening a file on a test mount.
type caller struct {
	cmd  *exec.Cmd
	tid  int
	done chan struct{} // closed once the child has exited
	last string        // the child's last line, once done
}

// startCaller starts cmd, whose standard output says "tid N" first if
// the thread that opens is not the process's first. At the test's end it
// kills the child, and calls release (which must let a killed child's
// op end) before waiting for it.
func startCaller(t *testing.T, cmd *exec.Cmd, ownTid bool, release func()) *caller {
	t.Helper()
	cmd.Dir = t.TempDir() // a core dump lands here, not in the package
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &caller{cmd: cmd, tid: cmd.Process.Pid, done: make(chan struct{})}
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for i := 0; sc.Scan(); i++ {
			if i == 0 {
				first <- sc.Text()
			}
			c.last = sc.Text()
		}
		close(first)
		cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			cmd.Process.Kill()
			release()
			<-c.done
		}
	})
	if !ownTid {
		line, ok := <-first
		require.True(t, ok, "no thread id from the caller; its stderr: %s", &stderr)
		_, err := fmt.Sscanf(line, "tid %d", &c.tid)
		require.NoError(t, err, "line %q", line)
	}
	return c
}

// waitFor polls cond; a minute without it fails the test (a hang guard,
// not a timing).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after a minute", what)
		}
	}
}

// TestInterruptCancelsOnlyDyingCallers: a signal that reaches a caller
// waiting for the store cancels its op only if the signal ends the caller.
// A signal it handles (Go's SIGURG, a timer) lets the open finish and
// succeed, as on a local disk; a caller killed, also after such a signal,
// is answered at once, while the store still has not.
func TestInterruptCancelsOnlyDyingCallers(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	goCaller := func(path string) *exec.Cmd {
		cmd := exec.Command(exe, "-test.run=^TestInterruptHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), interruptHelperEnv+"="+path)
		return cmd
	}
	for _, tc := range []struct {
		name string
		// caller opens path; ownTid: with its first thread.
		caller func(path string) *exec.Cmd
		ownTid bool
		// signal signals it and returns the signal that kills it, or 0:
		// the caller survives.
		signal func(t *testing.T, c *caller, fsys *fileSystem) (killedBy syscall.Signal)
	}{
		{
			name:   "handled signal",
			caller: goCaller,
			signal: func(t *testing.T, c *caller, fsys *fileSystem) syscall.Signal {
				require.NoError(t, unix.Tgkill(c.cmd.Process.Pid, c.tid, syscall.SIGUSR1))
				waitFor(t, "interrupt", func() bool { return fsys.interrupts.Load() == 1 })
				return 0
			},
		},
		{
			name:   "killed after a handled signal",
			caller: goCaller,
			signal: func(t *testing.T, c *caller, fsys *fileSystem) syscall.Signal {
				require.NoError(t, unix.Tgkill(c.cmd.Process.Pid, c.tid, syscall.SIGUSR1))
				waitFor(t, "interrupt", func() bool { return fsys.interrupts.Load() == 1 })
				// Killed after ferry found it alive: the kernel sends no
				// second interrupt for the kill.
				waitFor(t, "a look at the caller", func() bool { return fsys.interruptLooks.Load() >= 1 })
				require.NoError(t, c.cmd.Process.Kill())
				return syscall.SIGKILL
			},
		},
		{
			name:   "Ctrl-C",
			caller: func(p string) *exec.Cmd { return exec.Command("cat", p) },
			ownTid: true,
			signal: func(t *testing.T, c *caller, _ *fileSystem) syscall.Signal {
				require.NoError(t, c.cmd.Process.Signal(syscall.SIGINT))
				return syscall.SIGINT
			},
		},
		{
			// A core-dumping signal is not made a SIGKILL by the kernel.
			name: "SIGQUIT",
			caller: func(p string) *exec.Cmd {
				return exec.Command("sh", "-c", `ulimit -c 0 && exec cat "$0"`, p)
			},
			ownTid: true,
			signal: func(t *testing.T, c *caller, _ *fileSystem) syscall.Signal {
				require.NoError(t, c.cmd.Process.Signal(syscall.SIGQUIT))
				return syscall.SIGQUIT
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newTestBucket()
			b.put("f", []byte("x"))
			gate := make(chan struct{})
			var reached atomic.Int32
			b.SetFaults(mem.Faults{Stat: func(_ context.Context, req *bucket.StatRequest) error {
				if req.Name == "f" {
					reached.Add(1)
					<-gate
				}
				return nil
			}})
			dir, fsys := mount(t, b, nil, MountOptions{})
			var open sync.Once
			openGate := func() { open.Do(func() { close(gate) }) }
			t.Cleanup(openGate) // before the unmount, which waits for the fetch
			c := startCaller(t, tc.caller(filepath.Join(dir, "f")), tc.ownTid, openGate)
			waitFor(t, "stat of f", func() bool { return reached.Load() == 1 })
			if sig := tc.signal(t, c, fsys); sig != 0 {
				select {
				case <-c.done:
				case <-time.After(time.Minute):
					t.Fatal("a killed caller waited for the store")
				}
				assert.NotContains(t, c.last, "open", "the caller died in the open")
				assert.Equal(t, uint64(1), fsys.interruptsCancelled.Load())
				ws := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
				assert.True(t, ws.Signaled() && ws.Signal() == sig, "the caller ended by %v: %v", sig, c.cmd.ProcessState)
				return
			}
			openGate()
			<-c.done
			assert.Equal(t, "open <nil>", c.last, "a handled signal failed the open")
			assert.Zero(t, fsys.interruptsCancelled.Load())
		})
	}
}
