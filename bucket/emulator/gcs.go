package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// GCS is a running fake-gcs-server speaking plain HTTP on loopback, with
// its objects stored on disk (so benchmark data does not sit in RAM).
type GCS struct {
	*Server
	// Endpoint is the server's root URL, "http://127.0.0.1:PORT". Both the
	// JSON API (Endpoint + "/storage/v1/") and XML reads (Endpoint +
	// "/bucket/object") are served there.
	Endpoint string
}

// StartGCS runs fake-gcs-server with its filesystem backend under
// dir/data and its log in dir/fake-gcs-server.log. The caller must Stop it.
//
// The filesystem backend maps object names to paths, so it cannot hold
// directory markers (a Put of "dir/" succeeds but stores nothing) nor an
// object "a" next to "a/b". Use StartGCSInMemory where those matter.
func StartGCS(ctx context.Context, dir string) (*GCS, error) {
	return StartGCSWith(ctx, GCSOptions{Dir: dir})
}

// StartGCSInMemory runs fake-gcs-server keeping objects in its memory,
// which has GCS's naming semantics (markers, "a" next to "a/b"); for
// small test data. dir only holds the log.
func StartGCSInMemory(ctx context.Context, dir string) (*GCS, error) {
	return StartGCSWith(ctx, GCSOptions{Dir: dir, Memory: true})
}

// GCSOptions configures StartGCSWith.
type GCSOptions struct {
	// Dir holds the log and, unless Memory, the objects (under Dir/data).
	Dir string
	// Memory keeps objects in the emulator's memory instead.
	Memory bool
	// Port to listen on; 0 picks a free one.
	Port int
	// PublicHost is the host:port clients dial. XML-API reads (the
	// storage library's ranged reads) are only routed when the Host
	// header equals it, so a proxy in front of the emulator must be named
	// here. "" means the emulator's own address.
	PublicHost string
}

// StartGCSWith runs fake-gcs-server as opts say. The caller must Stop it.
func StartGCSWith(ctx context.Context, opts GCSOptions) (*GCS, error) {
	bin, err := Binary(ctx, FakeGCS)
	if err != nil {
		return nil, err
	}
	port := opts.Port
	if port == 0 {
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	addr := hostPort(port)
	public := opts.PublicHost
	if public == "" {
		public = addr
	}
	args := []string{
		"-scheme", "http",
		"-host", "127.0.0.1",
		"-port", strconv.Itoa(port),
		"-public-host", public,
		// Where resumable uploads are told to continue.
		"-external-url", "http://" + addr,
		// Per-request info lines would grow the log by GBs in benchmarks.
		"-log-level", "warn",
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	if opts.Memory {
		args = append(args, "-backend", "memory")
	} else {
		root := filepath.Join(opts.Dir, "data")
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, err
		}
		args = append(args, "-backend", "filesystem", "-filesystem-root", root)
	}
	srv, err := StartProcess(ctx, bin, args, nil, addr, filepath.Join(opts.Dir, "fake-gcs-server.log"), 30*time.Second)
	if err != nil {
		return nil, err
	}
	return &GCS{Server: srv, Endpoint: "http://" + addr}, nil
}

// CreateBucket creates an empty bucket through the JSON API. An existing
// bucket of that name is an error.
func (g *GCS) CreateBucket(ctx context.Context, name string) error {
	body, err := json.Marshal(map[string]string{"name": name})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.Endpoint+"/storage/v1/b?project=ferry-test", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("creating gcs bucket %q: %w", name, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("creating gcs bucket %q: %s: %s", name, resp.Status, msg)
	}
	return nil
}

// TB is the part of testing.TB the test helpers need; it keeps the
// "testing" package out of non-test builds.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
	Context() context.Context
}

// NewGCSForTest starts an in-memory fake-gcs-server (StartGCSInMemory: GCS
// naming semantics, small data) and stops it when the test ends, failing
// the test if it cannot start.
func NewGCSForTest(t TB) *GCS {
	t.Helper()
	g, err := StartGCSInMemory(t.Context(), t.TempDir())
	if err != nil {
		t.Fatalf("starting fake-gcs-server: %v", err)
	}
	t.Cleanup(func() { _ = g.Stop() })
	return g
}
