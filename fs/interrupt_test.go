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

// TestStatusQuitting: which pending signals make a caller quitting, from
// the fields of /proc/PID/status.
func TestStatusQuitting(t *testing.T) {
	bit := func(s syscall.Signal) uint64 { return 1 << (s - 1) }
	type fields struct {
		tracer                  int
		pnd, shd, blk, ign, cgt uint64
	}
	status := func(f fields) []byte {
		return fmt.Appendf(nil, "Name:\tcat\nState:\tS (sleeping)\nTracerPid:\t%d\nSigQ:\t1/95162\n"+
			"SigPnd:\t%016x\nShdPnd:\t%016x\nSigBlk:\t%016x\nSigIgn:\t%016x\nSigCgt:\t%016x\n"+
			"CapInh:\t0000000000000000\n", f.tracer, f.pnd, f.shd, f.blk, f.ign, f.cgt)
	}
	// Go's runtime handles every signal it can.
	goCaught := ^(bit(syscall.SIGKILL) | bit(syscall.SIGSTOP))
	for _, tc := range []struct {
		name     string
		f        fields
		quitting bool
	}{
		{"nothing pending", fields{}, false},
		{"SIGKILL on the thread", fields{pnd: bit(syscall.SIGKILL)}, true},
		{"SIGKILL on the process", fields{shd: bit(syscall.SIGKILL)}, true},
		{"SIGKILL in a Go program", fields{pnd: bit(syscall.SIGKILL) | bit(syscall.SIGURG), cgt: goCaught}, true},
		{"SIGKILL under a debugger", fields{tracer: 77, pnd: bit(syscall.SIGKILL)}, true},
		{"Go's preemption", fields{pnd: bit(syscall.SIGURG), cgt: goCaught}, false},
		{"SIGQUIT not handled", fields{pnd: bit(syscall.SIGQUIT)}, true},
		{"SIGSEGV on the process", fields{shd: bit(syscall.SIGSEGV)}, true},
		{"SIGSEGV handled", fields{pnd: bit(syscall.SIGSEGV), cgt: goCaught}, false},
		{"SIGABRT blocked", fields{pnd: bit(syscall.SIGABRT), blk: bit(syscall.SIGABRT)}, false},
		{"SIGINT handled (Python)", fields{pnd: bit(syscall.SIGINT), cgt: bit(syscall.SIGINT)}, true},
		{"SIGTERM handled", fields{shd: bit(syscall.SIGTERM), cgt: goCaught}, true},
		{"SIGHUP handled (a daemon's reload)", fields{pnd: bit(syscall.SIGHUP), cgt: bit(syscall.SIGHUP)}, false},
		{"SIGHUP by default", fields{shd: bit(syscall.SIGHUP)}, true},
		{"SIGQUIT handled (Java's thread dump)", fields{pnd: bit(syscall.SIGQUIT), cgt: bit(syscall.SIGQUIT)}, false},
		{"SIGINT blocked", fields{pnd: bit(syscall.SIGINT), blk: bit(syscall.SIGINT)}, false},
		{"SIGQUIT ignored", fields{shd: bit(syscall.SIGQUIT), ign: bit(syscall.SIGQUIT)}, false},
		{"SIGINT under a debugger", fields{tracer: 77, pnd: bit(syscall.SIGINT)}, false},
		{"SIGSEGV under a debugger", fields{tracer: 77, pnd: bit(syscall.SIGSEGV)}, false},
		{"SIGALRM handled", fields{pnd: bit(syscall.SIGALRM), cgt: bit(syscall.SIGALRM)}, false},
		{"SIGPROF handled", fields{pnd: bit(syscall.SIGPROF), cgt: bit(syscall.SIGPROF)}, false},
		{"SIGCHLD handled", fields{shd: bit(syscall.SIGCHLD), cgt: bit(syscall.SIGCHLD)}, false},
		{"SIGUSR1 handled", fields{pnd: bit(syscall.SIGUSR1), cgt: goCaught}, false},
		{"SIGUSR1 by default", fields{pnd: bit(syscall.SIGUSR1)}, true},
		{"SIGURG by default", fields{pnd: bit(syscall.SIGURG)}, false},
		{"SIGCHLD by default", fields{shd: bit(syscall.SIGCHLD)}, false},
		{"SIGWINCH by default", fields{pnd: bit(syscall.SIGWINCH)}, false},
		{"SIGCONT by default", fields{pnd: bit(syscall.SIGCONT)}, false},
		{"SIGSTOP", fields{shd: bit(syscall.SIGSTOP)}, false},
		{"SIGTSTP by default", fields{shd: bit(syscall.SIGTSTP)}, false},
		{"SIGTTIN by default", fields{pnd: bit(syscall.SIGTTIN)}, false},
		{"SIGTTOU by default", fields{pnd: bit(syscall.SIGTTOU)}, false},
		{"SIGRTMIN+3 by default", fields{pnd: bit(37)}, true},
		{"signal 64 by default", fields{pnd: bit(64)}, true},
	} {
		got, err := statusQuitting(status(tc.f))
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.quitting, got, tc.name)
	}

	full := string(status(fields{}))
	for _, k := range []string{"TracerPid", "SigCgt", "ShdPnd"} {
		i := strings.Index(full, k+":")
		j := i + strings.Index(full[i:], "\n") + 1
		_, err := statusQuitting([]byte(full[:i] + full[j:]))
		assert.ErrorContains(t, err, k, "a missing field is an error, not a live caller")
	}
	_, err := statusQuitting([]byte(strings.Replace(full, "SigPnd:\t0000000000000000", "SigPnd:\tzz", 1)))
	assert.ErrorContains(t, err, "SigPnd")
	_, err = statusQuitting([]byte(strings.Replace(full, "TracerPid:\t0", "TracerPid:\tx", 1)))
	assert.ErrorContains(t, err, "TracerPid")

	// This very thread, alive, and a thread that is not there.
	runtime.LockOSThread()
	quitting, err := threadQuitting(uint32(unix.Gettid()))
	runtime.UnlockOSThread()
	require.NoError(t, err)
	assert.False(t, quitting)
	_, err = threadQuitting(1 << 30)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// interruptHelperEnv names the file TestInterruptHelper opens.
const interruptHelperEnv = "FERRY_TEST_INTERRUPT_OPEN"

// TestInterruptHelper is not a test but a caller for the interrupt tests,
// which run this test binary again with $FERRY_TEST_INTERRUPT_OPEN set: it
// handles SIGUSR1 (as a Go program handles SIGURG) and SIGINT (as Python
// does), prints "tid N" for the thread that then opens the file and
// "open ERR" when the open returns.
func TestInterruptHelper(t *testing.T) {
	path := os.Getenv(interruptHelperEnv)
	if path == "" {
		t.Skip("a caller run by TestInterruptCancelsOnlyQuittingCallers")
	}
	signal.Notify(make(chan os.Signal, 2), syscall.SIGUSR1, syscall.SIGINT)
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
		if !ok {
			select {
			case <-c.done: // stderr is complete
			case <-time.After(time.Minute):
			}
			require.Fail(t, "no thread id from the caller", "its stderr: %s", &stderr)
		}
		_, err := fmt.Sscanf(line, "tid %d", &c.tid)
		require.NoError(t, err, "line %q", line)
	}
	return c
}

// interruptCase is one caller of TestInterruptCancelsOnlyQuittingCallers.
type interruptCase struct {
	name string
	// caller opens path; ownTid: with its first thread.
	caller func(path string) *exec.Cmd
	ownTid bool
	// signal signals the caller, waiting for the open.
	signal func(t *testing.T, c *caller, fsys *fileSystem)
	// killedBy: the signal that ends the caller, or 0 and the open's
	// outcome.
	killedBy syscall.Signal
	open     string
}

// interruptCases are the callers: Go children (this test binary, with
// interruptHelperEnv) and cat, signalled in turn.
func interruptCases(t *testing.T) []interruptCase {
	exe, err := os.Executable()
	require.NoError(t, err)
	goCaller := func(path string) *exec.Cmd {
		cmd := exec.Command(exe, "-test.run=^TestInterruptHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), interruptHelperEnv+"="+path)
		return cmd
	}
	// cat with the signals' default actions: a shell started in the
	// background without job control ignores SIGINT and SIGQUIT, and its
	// children inherit that.
	catCaller := func(path string) *exec.Cmd {
		return exec.Command("sh", "-c", `ulimit -c 0 && exec env --default-signal=INT,QUIT cat "$0"`, path)
	}
	tgkill := func(t *testing.T, c *caller, sig syscall.Signal) {
		require.NoError(t, unix.Tgkill(c.cmd.Process.Pid, c.tid, sig))
	}
	interrupted := func(t *testing.T, fsys *fileSystem) {
		require.Eventually(t, func() bool { return fsys.intr.count.Load() == 1 }, time.Minute, time.Millisecond, "no interrupt came")
	}
	return []interruptCase{
		{
			name:   "handled signal",
			caller: goCaller,
			signal: func(t *testing.T, c *caller, fsys *fileSystem) {
				tgkill(t, c, syscall.SIGUSR1)
				interrupted(t, fsys)
			},
			open: "open <nil>",
		},
		{
			name:   "killed after a handled signal",
			caller: goCaller,
			signal: func(t *testing.T, c *caller, fsys *fileSystem) {
				tgkill(t, c, syscall.SIGUSR1)
				interrupted(t, fsys)
				// Killed after ferry found it alive: the kernel sends no
				// second interrupt for the kill.
				require.Eventually(t, func() bool { return fsys.intr.looks.Load() >= 1 }, time.Minute, time.Millisecond, "ferry never looked at the caller")
				require.NoError(t, c.cmd.Process.Kill())
			},
			killedBy: syscall.SIGKILL,
		},
		{
			// As Python raises KeyboardInterrupt.
			name:   "handled Ctrl-C",
			caller: goCaller,
			signal: func(t *testing.T, c *caller, _ *fileSystem) { tgkill(t, c, syscall.SIGINT) },
			open:   "open interrupted system call",
		},
		{
			name:     "Ctrl-C",
			caller:   catCaller,
			ownTid:   true,
			signal:   func(t *testing.T, c *caller, _ *fileSystem) { require.NoError(t, c.cmd.Process.Signal(syscall.SIGINT)) },
			killedBy: syscall.SIGINT,
		},
		{
			// A core-dumping signal is not made a SIGKILL by the kernel.
			name:   "SIGQUIT",
			caller: catCaller,
			ownTid: true,
			signal: func(t *testing.T, c *caller, _ *fileSystem) {
				require.NoError(t, c.cmd.Process.Signal(syscall.SIGQUIT))
			},
			killedBy: syscall.SIGQUIT,
		},
	}
}

// TestInterruptCancelsOnlyQuittingCallers: a signal that reaches a
// caller waiting for the store cancels its op only if the caller is
// quitting. A signal it handles (Go's SIGURG, a timer) lets the open
// finish and succeed, as on a local disk; a caller killed, also after
// such a signal, or asked to stop, is answered at once, while the store
// still has not.
func TestInterruptCancelsOnlyQuittingCallers(t *testing.T) {
	for _, tc := range interruptCases(t) {
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
			require.Eventually(t, func() bool { return reached.Load() == 1 }, time.Minute, time.Millisecond, "the open never reached the store")
			tc.signal(t, c, fsys)
			if tc.open == "open <nil>" {
				openGate()
			}
			select {
			case <-c.done:
			case <-time.After(time.Minute):
				t.Fatal("the caller waited for the store")
			}
			ws := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
			if tc.killedBy != 0 {
				assert.NotContains(t, c.last, "open", "the caller died in the open")
				assert.True(t, ws.Signaled() && ws.Signal() == tc.killedBy, "the caller ended by %v: %v", tc.killedBy, c.cmd.ProcessState)
				assert.Equal(t, uint64(1), fsys.intr.cancelled.Load())
				return
			}
			assert.Equal(t, tc.open, c.last)
			assert.True(t, ws.Exited(), "the caller lived on: %v", c.cmd.ProcessState)
			want := uint64(0)
			if tc.open != "open <nil>" {
				want = 1
			}
			assert.Equal(t, want, fsys.intr.cancelled.Load())
		})
	}
}
