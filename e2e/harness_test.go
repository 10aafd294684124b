package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/emulator"
	"ferry/bucket/file"
	"ferry/bucket/gcs"
	"ferry/bucket/s3"
	"ferry/tools/bench/netem"
)

// ferryBin is the binary under test, built once in TestMain.
var ferryBin string

func TestMain(m *testing.M) {
	if spec := os.Getenv(fuseHelperEnv); spec != "" {
		os.Exit(runFuseHelper(spec)) // this process plays the privileged helper
	}
	dir, err := os.MkdirTemp("", "ferry-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ferryBin = filepath.Join(dir, "ferry")
	build := exec.Command("go", "build", "-o", ferryBin, ".")
	build.Dir = ".."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building ferry:", err)
		os.Exit(1)
	}
	code := m.Run()
	stopEmulators()
	os.RemoveAll(dir)
	os.Exit(code)
}

// emulators shared by the package's tests, started on first use. Tests do
// not run in parallel, so each test's request counts are its own.
var (
	emuOnce  sync.Once
	emuErr   error
	emuDir   string
	gcsEmu   *emulator.GCS
	gcsProxy *netem.Server
	s3Emu    *emulator.S3
	s3Proxy  *netem.Server
)

func startEmulators() error {
	emuOnce.Do(func() {
		ctx := context.Background()
		emuDir, emuErr = os.MkdirTemp("", "ferry-e2e-emu-")
		if emuErr != nil {
			return
		}
		// GCS: the proxy's address must be known first, because
		// fake-gcs-server routes XML reads only for its public host.
		port, err := emulator.FreePort()
		if err != nil {
			emuErr = err
			return
		}
		direct := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		p, err := netem.New("http://"+direct, netem.Link{}, nil)
		if err != nil {
			emuErr = err
			return
		}
		if gcsProxy, emuErr = netem.Serve(p, "127.0.0.1:0"); emuErr != nil {
			return
		}
		gcsEmu, emuErr = emulator.StartGCSWith(ctx, emulator.GCSOptions{
			Dir: filepath.Join(emuDir, "gcs"), Memory: true, Port: port, PublicHost: gcsProxy.Addr})
		if emuErr != nil {
			return
		}
		s3Emu, emuErr = emulator.StartS3(ctx, filepath.Join(emuDir, "s3"))
		if emuErr != nil {
			return
		}
		p, err = netem.New(s3Emu.Endpoint, netem.Link{}, nil)
		if err != nil {
			emuErr = err
			return
		}
		s3Proxy, emuErr = netem.Serve(p, "127.0.0.1:0")
	})
	return emuErr
}

func stopEmulators() {
	for _, p := range []*netem.Server{gcsProxy, s3Proxy} {
		if p != nil {
			_ = p.Close()
		}
	}
	if gcsEmu != nil {
		_ = gcsEmu.Stop()
	}
	if s3Emu != nil {
		_ = s3Emu.Stop()
	}
	if emuDir != "" {
		os.RemoveAll(emuDir)
	}
}

// store is one fresh bucket and how to mount it.
type store struct {
	kind string
	url  string   // SOURCE for ferry
	args []string // ferry flags that reach the store
	env  []string // extra environment for ferry (credentials)
	w    bucket.Writer
	// proxy counts requests that reached the store; nil for file://.
	proxy *netem.Server
}

var bucketSeq atomic.Int64

// newStore makes an empty bucket of the given kind: "gcs", "s3" or "file".
func newStore(t *testing.T, kind string) *store {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("e2e-%d-%d", os.Getpid()%100000, bucketSeq.Add(1))
	switch kind {
	case "file":
		dir := t.TempDir()
		b, err := file.New(file.Config{Dir: dir})
		require.NoError(t, err)
		return &store{kind: kind, url: "file://" + dir, w: b}
	case "gcs":
		require.NoError(t, startEmulators())
		require.NoError(t, gcsEmu.CreateBucket(ctx, name))
		b, err := gcs.New(ctx, gcs.Config{Bucket: name, Endpoint: gcsEmu.Endpoint, Anonymous: true})
		require.NoError(t, err)
		return &store{kind: kind, url: "gs://" + name, w: b, proxy: gcsProxy,
			args: []string{"--endpoint", "http://" + gcsProxy.Addr, "--anonymous"}}
	case "s3":
		require.NoError(t, startEmulators())
		require.NoError(t, s3Emu.CreateBucket(ctx, name))
		b, err := s3.New(ctx, s3.Config{Bucket: name, Endpoint: s3Emu.Endpoint, Region: s3Emu.Region,
			PathStyle: true, AccessKey: s3Emu.AccessKey, SecretKey: s3Emu.SecretKey})
		require.NoError(t, err)
		return &store{kind: kind, url: "s3://" + name, w: b, proxy: s3Proxy,
			args: []string{"--endpoint", "http://" + s3Proxy.Addr, "--s3-path-style", "--region", s3Emu.Region},
			env:  []string{"AWS_ACCESS_KEY_ID=" + s3Emu.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3Emu.SecretKey}}
	}
	t.Fatalf("unknown store kind %q", kind)
	return nil
}

// put stages an object.
func (s *store) put(t *testing.T, name string, data []byte) {
	t.Helper()
	_, err := s.w.Put(context.Background(), &bucket.PutRequest{Name: name, Data: data})
	require.NoError(t, err, "staging %q", name)
}

// requests is how many requests reached the store so far.
func (s *store) requests() int64 {
	if s.proxy == nil {
		return 0
	}
	return s.proxy.Counters().Requests
}

// bytesServed is how many body bytes the store sent so far.
func (s *store) bytesServed() int64 {
	if s.proxy == nil {
		return 0
	}
	return s.proxy.Counters().BytesServed
}

// content is deterministic, incompressible data for name.
func content(name string, size int) []byte {
	seed := sha256.Sum256([]byte(name))
	b := make([]byte, size)
	_, _ = io.ReadFull(rand.NewChaCha8(seed), b)
	return b
}

// mounted is a live ferry mount.
type mounted struct {
	dir     string
	pid     int
	log     string
	metrics string // host:port of /metrics, if asked for
}

// mount runs ferry in its default background mode on a fresh directory
// and registers the unmount. Extra flags go before SOURCE.
func mount(t *testing.T, s *store, flags ...string) *mounted {
	t.Helper()
	return mountAt(t, s, t.TempDir(), flags...)
}

func mountAt(t *testing.T, s *store, dir string, flags ...string) *mounted {
	t.Helper()
	m := &mounted{dir: dir, log: filepath.Join(t.TempDir(), "ferry.log")}
	args := append([]string{}, s.args...)
	args = append(args, flags...)
	for i, a := range args {
		if a == "--metrics-addr" && i+1 < len(args) {
			m.metrics = args[i+1]
		}
	}
	args = append(args, "--log-file", m.log, s.url, dir)
	cmd := exec.Command(ferryBin, args...)
	cmd.Env = append(os.Environ(), s.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		logs, _ := os.ReadFile(m.log)
		t.Fatalf("ferry %s: %v\n%s\nlog:\n%s", strings.Join(args, " "), err, out, logs)
	}
	m.pid = daemonPID(dir)
	require.NotZero(t, m.pid, "no ferry process serving %s", dir)
	t.Cleanup(func() {
		m.unmount(t)
		if t.Failed() {
			logs, _ := os.ReadFile(m.log)
			t.Logf("ferry log for %s:\n%s", dir, tail(string(logs), 4000))
		}
	})
	return m
}

// freeAddr is a loopback host:port that was free a moment ago.
func freeAddr(t *testing.T) string {
	port, err := emulator.FreePort()
	require.NoError(t, err)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// daemonPID finds the ferry process serving dir: the one whose last
// argument is dir.
func daemonPID(dir string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) >= 2 && args[len(args)-1] == dir && pid != os.Getpid() {
			if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && filepath.Base(exe) == "ferry" {
				return pid
			}
		}
	}
	return 0
}

func isMounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

func alive(pid int) bool {
	if pid == 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie has exited; its parent (not us, in background mode) reaps it.
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

// unmount unmounts (retrying while busy) and waits for the daemon to
// exit; as a last resort it kills it and detaches the mount lazily.
func (m *mounted) unmount(t *testing.T) {
	deadline := time.Now().Add(15 * time.Second)
	for isMounted(m.dir) && time.Now().Before(deadline) {
		if err := exec.Command("umount", m.dir).Run(); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for alive(m.pid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(m.pid) || isMounted(m.dir) {
		t.Errorf("ferry on %s did not stop cleanly; killing pid %d", m.dir, m.pid)
		_ = syscall.Kill(m.pid, syscall.SIGKILL)
		_ = exec.Command("umount", "-l", m.dir).Run()
	}
}

// vmHWM is the daemon's peak resident set in bytes.
func (m *mounted) vmHWM(t *testing.T) int64 { return m.procStatus(t, "VmHWM") }

// vmRSS is the ferry process's resident set size now, in bytes.
func (m *mounted) vmRSS(t *testing.T) int64 { return m.procStatus(t, "VmRSS") }

// procStatus is a size field of the ferry process's /proc/PID/status, in
// bytes.
func (m *mounted) procStatus(t *testing.T, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line)
			kb, err := strconv.ParseInt(f[1], 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatalf("no %s", field)
	return 0
}

// metric sums the samples of a metric family whose labels include want.
func (m *mounted) metric(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	require.NotEmpty(t, m.metrics, "mount without --metrics-addr")
	resp, err := http.Get("http://" + m.metrics + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	fam, ok := fams[name]
	if !ok {
		return 0
	}
	var sum float64
next:
	for _, s := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range s.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case s.Counter != nil:
			sum += s.GetCounter().GetValue()
		case s.Gauge != nil:
			sum += s.GetGauge().GetValue()
		case s.Untyped != nil:
			sum += s.GetUntyped().GetValue()
		}
	}
	return sum
}

// dropCaches empties the kernel's page, dentry and inode caches so that
// reads and lookups reach ferry.
func dropCaches(t *testing.T) {
	t.Helper()
	require.NoError(t, exec.Command("sync").Run())
	require.NoError(t, os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200))
}

func requireSameFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes differ from the %d staged (first difference at %d)", path, len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
