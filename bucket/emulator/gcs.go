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
	root := filepath.Join(dir, "data")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	return startGCS(ctx, dir, "-backend", "filesystem", "-filesystem-root", root)
}

// StartGCSInMemory runs fake-gcs-server keeping objects in its memory,
// which has GCS's naming semantics (markers, "a" next to "a/b"); for
// small test data. dir only holds the log.
func StartGCSInMemory(ctx context.Context, dir string) (*GCS, error) {
	return startGCS(ctx, dir, "-backend", "memory")
}

func startGCS(ctx context.Context, dir string, backendArgs ...string) (*GCS, error) {
	bin, err := Binary(ctx, FakeGCS)
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	addr := hostPort(port)
	args := []string{
		"-scheme", "http",
		"-host", "127.0.0.1",
		"-port", strconv.Itoa(port),
		// XML-API reads (the storage library's default for ranged reads)
		// are only routed when the Host header equals -public-host, so it
		// must be exactly the host:port clients dial.
		"-public-host", addr,
		// Where resumable uploads are told to continue.
		"-external-url", "http://" + addr,
		// Per-request info lines would grow the log by GBs in benchmarks.
		"-log-level", "warn",
	}
	args = append(args, backendArgs...)
	srv, err := StartProcess(ctx, bin, args, nil, addr, filepath.Join(dir, "fake-gcs-server.log"), 30*time.Second)
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
