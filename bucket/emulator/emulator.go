// Package emulator runs the object-store emulators that ferry's tests and
// benchmarks talk to — fake-gcs-server for GCS and versitygw for S3 — and
// SeaweedFS, the cache tier put in front of them (seaweed.go), as real
// child processes listening on loopback. Each pinned version is built
// once through the Go module proxy and reused.
//
// It must never leave a process behind: every Server is stopped by its
// owner (tests register Stop with t.Cleanup), and a server that fails to
// come up is killed before Start returns.
package emulator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Tool is one emulator program pinned to a version.
type Tool struct {
	// Name of the binary, e.g. "fake-gcs-server".
	Name string
	// Package is the Go package path of its main package.
	Package string
	// Version is the pinned module version.
	Version string
	// EnvVar, when set in the environment, names a prebuilt binary to use
	// instead of building one (CI builds once and exports it).
	EnvVar string
	// FirstBuild is about how long building it takes with empty Go
	// caches (modules downloaded, everything compiled), to tell a user
	// who waits for it.
	FirstBuild time.Duration
	// InModule, if set, is the main package's directory inside the module
	// Package: the module is downloaded and that directory built inside
	// it, for a module whose go.mod has replace directives, which
	// `go install pkg@version` refuses.
	InModule string
}

var (
	// FakeGCS is fake-gcs-server, the GCS JSON/XML API emulator.
	FakeGCS = Tool{
		Name:    "fake-gcs-server",
		Package: "github.com/fsouza/fake-gcs-server",
		Version: "v1.56.1",
		EnvVar:  "FERRY_FAKE_GCS_SERVER",
		// 46-76 s on a 2-vCPU machine (docs/notes/2026-12-02-first-run.md).
		FirstBuild: 75 * time.Second,
	}
	// VersityGW is versitygw, an S3 gateway that serves a local directory.
	VersityGW = Tool{
		Name:    "versitygw",
		Package: "github.com/versity/versitygw/cmd/versitygw",
		Version: "v1.8.0",
		EnvVar:  "FERRY_VERSITYGW",
		// 91 s on a 2-vCPU machine (docs/notes/2026-12-02-first-run.md).
		FirstBuild: 90 * time.Second,
	}
)

// binDir is where built emulators are kept: $FERRY_EMULATOR_DIR, or the
// user cache directory.
func binDir() (string, error) {
	if d := os.Getenv("FERRY_EMULATOR_DIR"); d != "" {
		return d, nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(c, "ferry", "emulators"), nil
}

var buildMu sync.Mutex

// ErrNotBuilt is Built's answer for a tool that has not been built yet.
var ErrNotBuilt = errors.New("not built")

// Built returns the path of the tool's binary if it is already there
// ($EnvVar, or an earlier build), without building it: for tests that
// skip when a slow-to-build tool is absent.
func Built(tool Tool) (string, error) {
	if p := os.Getenv(tool.EnvVar); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%q: %w", tool.EnvVar, p, err)
		}
		return p, nil
	}
	dir, err := binDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, tool.Name+"-"+tool.Version, tool.Name)
	if _, err := os.Stat(bin); err != nil {
		return bin, fmt.Errorf("%s@%s: %w (no %s, and $%s unset)", tool.Name, tool.Version, ErrNotBuilt, bin, tool.EnvVar)
	}
	return bin, nil
}

// Binary returns the path of the tool's binary, building it with
// `go install pkg@version` (or inside the module, see InModule) on first
// use. Concurrent test processes share one build through a lock file.
func Binary(ctx context.Context, tool Tool) (string, error) {
	return BinaryTelling(ctx, tool, nil)
}

// BinaryTelling is Binary, saying through say (if not nil; one line per
// call, without a newline) when it builds the tool, about how long that
// takes the first time, and how long it took: a first run is otherwise a
// long silence.
func BinaryTelling(ctx context.Context, tool Tool, say func(format string, args ...any)) (string, error) {
	bin, err := Built(tool)
	if err == nil || !errors.Is(err, ErrNotBuilt) {
		return bin, err
	}
	dir := filepath.Dir(bin)

	buildMu.Lock()
	defer buildMu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // another process built it while we waited
	}
	start := time.Now()
	if say != nil {
		say("building %s %s, once; with empty Go caches this takes about %v",
			tool.Name, tool.Version, tool.FirstBuild.Round(time.Second))
	}
	if tool.InModule != "" {
		if err := buildInModule(ctx, tool, bin); err != nil {
			return "", err
		}
	} else {
		cmd := exec.CommandContext(ctx, "go", "install", tool.Package+"@"+tool.Version)
		// Build outside any module so our go.mod does not constrain it.
		cmd.Dir = os.TempDir()
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "GOWORK=off", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building %s@%s: %w\n%s", tool.Package, tool.Version, err, out)
		}
	}
	if say != nil {
		say("built %s in %v, kept in %s", tool.Name, time.Since(start).Round(time.Second), dir)
	}
	return bin, nil
}

// buildInModule downloads the module tool.Package@tool.Version through the
// module proxy and builds tool.InModule inside it into bin (through a
// temporary name, so an interrupted build leaves no binary behind).
func buildInModule(ctx context.Context, tool Tool, bin string) error {
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=0")
	dl := exec.CommandContext(ctx, "go", "mod", "download", "-json", tool.Package+"@"+tool.Version)
	dl.Dir = os.TempDir()
	dl.Env = env
	out, err := dl.Output()
	if err != nil {
		return fmt.Errorf("downloading %s@%s: %w", tool.Package, tool.Version, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return fmt.Errorf("downloading %s@%s: no module directory in %q (%v)", tool.Package, tool.Version, out, err)
	}
	tmp := bin + ".tmp"
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", tmp, tool.InModule)
	build.Dir = mod.Dir
	build.Env = env
	if out, err := build.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("building %s in %s@%s: %w\n%s", tool.InModule, tool.Package, tool.Version, err, out)
	}
	return os.Rename(tmp, bin)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Server is a running emulator process.
type Server struct {
	// Addr is the host:port it listens on.
	Addr string

	cmd  *exec.Cmd
	done chan struct{}
	log  string

	stopOnce sync.Once
	waitErr  error
}

// StartProcess runs bin with args, sends its output to logPath, and waits
// until addr accepts TCP connections (or timeout). On failure the process
// is killed and the error includes the tail of its log.
func StartProcess(ctx context.Context, bin string, args []string, env []string, addr, logPath string, timeout time.Duration) (*Server, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Env = append(os.Environ(), env...)
	// Own process group, and die with the parent if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	s := &Server{Addr: addr, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()

	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("%s exited before listening on %s: %v\n%s", filepath.Base(bin), addr, s.waitErr, tail(logPath))
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("%s did not listen on %s within %v\n%s", filepath.Base(bin), addr, timeout, tail(logPath))
		}
	}
}

// Stop terminates the process (SIGTERM, then SIGKILL after 5 s) and waits
// for it. Safe to call more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	})
	var exit *exec.ExitError
	if s.waitErr != nil && !errors.As(s.waitErr, &exit) {
		return s.waitErr
	}
	return nil
}

// Pid is the emulator's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// LogPath is where the emulator's output goes.
func (s *Server) LogPath() string { return s.log }

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// hostPort formats a loopback address.
func hostPort(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
