package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/flags"
)

// logRecorder is a slog.Handler that keeps "LEVEL message" of each record.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	return nil
}

func (r *logRecorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

// fakeSystem is an unmounter's view of the system, counting what it is
// asked to do. Unmounting or detaching successfully ends the mount
// (joined delivers), as the kernel would once its files are closed.
type fakeSystem struct {
	joined                    chan error
	attached                  bool    // our mount is still on the mount point
	unmountErrs               []error // one per call; nil (or none left) succeeds
	detachErr                 error
	filesOpen                 bool // a detach leaves the mount served
	asked, unmounts, detaches int
	aborts                    int
}

func (f *fakeSystem) unmounter(log *slog.Logger) *unmounter {
	return &unmounter{
		log:       log,
		dir:       "/mnt/x",
		topDevice: func() string { return "0:50" },
		mounted: func(dev string) bool {
			f.asked++
			if f.attached {
				return true
			}
			f.joined <- nil // detached: its last file is closed later
			return false
		},
		unmount: func() error {
			f.unmounts++
			if len(f.unmountErrs) > 0 {
				err := f.unmountErrs[0]
				f.unmountErrs = f.unmountErrs[1:]
				if err != nil {
					return err
				}
			}
			f.joined <- nil
			return nil
		},
		detach: func() error {
			f.detaches++
			if f.detachErr == nil && !f.filesOpen {
				f.joined <- nil
			}
			return f.detachErr
		},
		abort: func(dev string) error {
			f.aborts++
			f.joined <- nil
			return nil
		},
		grace: time.Hour,
	}
}

// TestUnmountLoop: what the serving loop does on an external unmount and
// on each signal, and what it logs.
func TestUnmountLoop(t *testing.T) {
	busy := errors.New("device or resource busy")
	for _, tc := range []struct {
		name    string
		sys     fakeSystem
		dev     string // the mount's device when it became live
		signals int
		// what the fake system was asked, and the log
		asked, unmounts, detaches int
		log                       []string
	}{{
		name: "unmounted from outside",
		sys:  fakeSystem{attached: true},
		dev:  "0:50",
		log:  []string{"INFO unmounted"},
	}, {
		name: "signal: unmounted", sys: fakeSystem{attached: true}, dev: "0:50", signals: 1,
		asked: 1, unmounts: 1,
		log: []string{"INFO unmounting", "INFO unmounted"},
	}, {
		name: "signal after a detach from outside: nothing to unmount", sys: fakeSystem{}, dev: "0:50", signals: 1,
		asked: 1,
		log:   []string{"INFO already detached from the mount point; serving the open files until they are closed", "INFO unmounted"},
	}, {
		name: "no device seen at mount time: unmount without asking", sys: fakeSystem{}, dev: "", signals: 1,
		unmounts: 1,
		log:      []string{"INFO unmounting", "INFO unmounted"},
	}, {
		name: "busy: detached lazily", sys: fakeSystem{attached: true, unmountErrs: []error{busy}}, dev: "0:50", signals: 1,
		asked: 1, unmounts: 1, detaches: 1,
		log: []string{"INFO unmounting", "WARN mount point busy: detached it; serving the open files until they are closed", "INFO unmounted"},
	}, {
		name: "busy and cannot detach: serves on until the next signal",
		sys:  fakeSystem{attached: true, unmountErrs: []error{busy}, detachErr: syscall.EPERM}, dev: "0:50", signals: 2,
		asked: 2, unmounts: 2, detaches: 1,
		log: []string{"INFO unmounting", "ERROR cannot unmount; still serving (close open files, or run fusermount3 -uz to detach)",
			"INFO unmounting", "INFO unmounted"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			sys := tc.sys
			sys.joined = make(chan error, 1)
			if tc.signals == 0 {
				sys.joined <- nil
			}
			sigs := make(chan os.Signal, tc.signals)
			for range tc.signals {
				sigs <- syscall.SIGTERM
			}
			rec := &logRecorder{}
			err := sys.unmounter(slog.New(rec)).wait(tc.dev, sys.joined, sigs)
			require.NoError(t, err)
			assert.Equal(t, tc.asked, sys.asked, "asked whether still mounted")
			assert.Equal(t, tc.unmounts, sys.unmounts, "unmounts")
			assert.Equal(t, tc.detaches, sys.detaches, "detaches")
			assert.Equal(t, tc.log, rec.lines())
			assert.Empty(t, sigs, "every signal was taken")
		})
	}

	// Join's error is the loop's.
	joined := make(chan error, 1)
	joined <- errors.New("connection lost")
	sys := &fakeSystem{joined: joined}
	err := sys.unmounter(slog.New(slog.DiscardHandler)).wait("0:50", joined, nil)
	assert.EqualError(t, err, "connection lost")
}

// TestDetachedMountEnds: a mount detached with files open is served
// until they are closed, but a second signal or the grace period ends
// it; a SIGHUP on the way only reopens the log.
func TestDetachedMountEnds(t *testing.T) {
	busy := errors.New("device or resource busy")
	sys := &fakeSystem{joined: make(chan error, 1), attached: true, unmountErrs: []error{busy}, filesOpen: true}
	rec := &logRecorder{}
	u := sys.unmounter(slog.New(rec))
	u.hup = &sighup{log: u.log, out: &logOutput{}}
	sigs := make(chan os.Signal, 3)
	sigs <- syscall.SIGTERM
	sigs <- syscall.SIGHUP
	sigs <- syscall.SIGTERM
	require.NoError(t, u.wait("0:50", sys.joined, sigs))
	assert.Equal(t, 1, sys.detaches)
	assert.Equal(t, 1, sys.aborts, "the second SIGTERM ended the connection")
	assert.Equal(t, []string{"INFO unmounting",
		"WARN mount point busy: detached it; serving the open files until they are closed",
		"INFO SIGHUP: no log file to reopen",
		"WARN second signal: ending the connection; files still open on the detached mount fail from now on",
		"INFO unmounted"}, rec.lines())

	// Detached from outside, no second signal: the grace period ends it.
	sys = &fakeSystem{joined: make(chan error, 1)}
	rec = &logRecorder{}
	u = sys.unmounter(slog.New(rec))
	u.mounted = func(string) bool { sys.asked++; return false } // its files stay open
	u.grace = 10 * time.Millisecond
	sigs <- syscall.SIGTERM
	require.NoError(t, u.wait("0:50", sys.joined, sigs))
	assert.Equal(t, 1, sys.aborts)
	assert.Contains(t, rec.lines(), "WARN files still open on the detached mount after the grace period: ending the connection; they fail from now on")
}

// TestSighup: a SIGHUP stops a foreground mount only when its terminal
// has gone; otherwise it reopens the log file, which logrotate has moved.
func TestSighup(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/ferry.log"
	out := &logOutput{path: path}
	require.NoError(t, out.open())
	defer out.Close()
	gone := false
	h := &sighup{log: slog.New(slog.NewTextHandler(out, nil)), out: out, hangup: true, ttyGone: func() bool { return gone }}

	h.log.Info("before")
	require.NoError(t, os.Rename(path, path+".1")) // logrotate
	assert.False(t, h.stops(syscall.SIGHUP), "a SIGHUP sent on purpose")
	h.log.Info("after")
	old, err := os.ReadFile(path + ".1")
	require.NoError(t, err)
	cur, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(old), "msg=before")
	assert.NotContains(t, string(old), "msg=after")
	assert.Contains(t, string(cur), "reopened the log file")
	assert.Contains(t, string(cur), "msg=after")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	gone = true
	assert.True(t, h.stops(syscall.SIGHUP), "the terminal hung up")
	h.hangup = false // background, nohup, or no terminal at start
	assert.False(t, h.stops(syscall.SIGHUP))
	assert.True(t, h.stops(syscall.SIGTERM))
}

func TestSetupWatch(t *testing.T) {
	// A signal during setup cancels it.
	sigs := make(chan os.Signal, 1)
	w := watchSetup(sigs, func(os.Signal) bool { return true })
	sigs <- syscall.SIGINT
	<-w.ctx.Done()
	assert.True(t, w.end())
	assert.True(t, w.end(), "end may be called again")
	w.stop()

	// Without one, setup ends with its context live, and a later signal
	// is left for the serving loop.
	sigs = make(chan os.Signal, 1)
	w = watchSetup(sigs, func(os.Signal) bool { return true })
	assert.False(t, w.end())
	sigs <- syscall.SIGTERM
	assert.NoError(t, w.ctx.Err(), "setup's context outlives setup")
	assert.Len(t, sigs, 1, "the watcher took a signal after setup")
	w.stop()
	assert.Error(t, w.ctx.Err(), "stop cancels it")
}

// fakeMount is a Mounted that ends when end is closed.
type fakeMount struct {
	end    chan struct{}
	joined func()
}

func (m *fakeMount) Join(context.Context) error {
	<-m.end
	m.joined()
	return nil
}

// TestServe: serve's order of events around a Mounter, with the
// system's unmounting faked.
func TestServe(t *testing.T) {
	cfg := &flags.Config{MountPoint: "/mnt/x"}
	log := slog.New(slog.DiscardHandler)
	quiet := func() *unmounter { return (&fakeSystem{joined: make(chan error, 1), attached: true}).unmounter(log) }

	t.Run("unmounted from outside", func(t *testing.T) {
		var events []string
		m := &fakeMount{end: make(chan struct{}), joined: func() { events = append(events, "joined") }}
		mount := func(ctx context.Context, got *flags.Config, s *Setup) (Mounted, error) {
			assert.Same(t, cfg, got)
			require.NotNil(t, s.Registry)
			s.Registry.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_test_total", Help: "x"}))
			s.Cleanup(func() { events = append(events, "close store") })
			s.Cleanup(func() { events = append(events, "close fs") })
			return m, nil
		}
		ready := func() {
			events = append(events, "ready")
			close(m.end)
		}
		require.NoError(t, serve(cfg, log, mount, ready, quiet()))
		assert.Equal(t, []string{"ready", "joined", "close fs", "close store"}, events)
	})

	t.Run("setup fails", func(t *testing.T) {
		closed, readied := 0, 0
		mount := func(ctx context.Context, _ *flags.Config, s *Setup) (Mounted, error) {
			s.Cleanup(func() { closed++ })
			return nil, errors.New("bucket gone")
		}
		err := serve(cfg, log, mount, func() { readied++ }, quiet())
		assert.EqualError(t, err, "bucket gone")
		assert.Equal(t, 1, closed, "what setup opened is closed")
		assert.Zero(t, readied)
	})

	t.Run("a signal during setup", func(t *testing.T) {
		readied := 0
		mount := func(ctx context.Context, _ *flags.Config, s *Setup) (Mounted, error) {
			require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("connecting: %w", ctx.Err())
			case <-time.After(time.Minute):
				return nil, errors.New("the signal did not cancel setup")
			}
		}
		err := serve(cfg, log, mount, func() { readied++ }, quiet())
		assert.ErrorIs(t, err, context.Canceled)
		assert.Zero(t, readied)
	})

	// The signal comes while the file system is being mounted, too late
	// for the Mounter to stop: the mount is undone.
	for _, unmountErr := range []error{nil, syscall.EBUSY} {
		t.Run(fmt.Sprintf("a signal while mounting, unmount error %v", unmountErr), func(t *testing.T) {
			readied := 0
			m := &fakeMount{end: make(chan struct{}), joined: func() {}}
			mount := func(ctx context.Context, _ *flags.Config, s *Setup) (Mounted, error) {
				require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
				<-ctx.Done()
				return m, nil
			}
			sys := &fakeSystem{joined: make(chan error, 1), attached: true}
			u := sys.unmounter(log)
			u.unmount = func() error {
				sys.unmounts++
				if unmountErr == nil {
					close(m.end)
				}
				return unmountErr
			}
			err := serve(cfg, log, mount, func() { readied++ }, u)
			if unmountErr == nil {
				assert.EqualError(t, err, "interrupted while mounting")
			} else {
				assert.EqualError(t, err, "interrupted while mounting, and cannot unmount /mnt/x: device or resource busy")
			}
			assert.Equal(t, 1, sys.unmounts)
			assert.Zero(t, readied)
		})
	}
}
