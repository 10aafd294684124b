package emulator

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Weed is SeaweedFS's one binary (master, volume server, filer and S3
// gateway): not a store emulator but a real distributed cache tier, put
// between ferry and an emulated origin by the scale-out tests and
// `bench cluster`. Its go.mod replaces another module, so it is built
// inside the downloaded module (about 8 minutes and 230 MB here); tests
// that need it look for it with Built and skip without it.
var Weed = Tool{
	Name:       "weed",
	Package:    "github.com/seaweedfs/seaweedfs",
	InModule:   "./weed",
	Version:    "v0.0.0-20261109003541-7506e5f91cd6",
	EnvVar:     "FERRY_WEED",
	FirstBuild: 8 * time.Minute,
}

// Seaweed is a running `weed server` with a master, one volume server, a
// filer and the S3 gateway, all on loopback in one process.
type Seaweed struct {
	*Server
	// Endpoint is the S3 gateway's URL, "http://127.0.0.1:PORT"; it
	// needs path-style addressing and, with no IAM configured, serves
	// anonymous requests.
	Endpoint string

	bin    string
	master string // host:port.grpcport of the master, for weed shell
	filer  string // host:port.grpcport of the filer, for weed shell
	dir    string
}

// StartSeaweed runs `weed server` with its data, metadata and log under
// dir (created if missing). bin is the weed binary (Binary(ctx, Weed) or
// Built(Weed)). Every port is chosen free and given explicitly (weed's
// defaults, and its gRPC ports at port+10000, would collide with other
// runs), the side services it starts by default (Iceberg and Lance
// catalogs) are off, and so is the master's telemetry, which would call
// out of this machine. The caller must Stop it.
func StartSeaweed(ctx context.Context, bin, dir string) (*Seaweed, error) {
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	var ports [8]int
	for i := range ports {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	port := func(i int) string { return strconv.Itoa(ports[i]) }
	args := []string{"server",
		"-dir=" + filepath.Join(dir, "data"), "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port=" + port(0), "-master.port.grpc=" + port(1), "-master.telemetry=false",
		"-volume.port=" + port(2), "-volume.port.grpc=" + port(3),
		"-filer", "-filer.port=" + port(4), "-filer.port.grpc=" + port(5),
		"-filer.localSocket=" + filepath.Join(dir, "filer.sock"),
		"-s3", "-s3.port=" + port(6), "-s3.port.grpc=" + port(7), "-s3.port.iceberg=0", "-s3.port.lance=0",
		// Without these it refuses a loopback origin ("reject remote
		// endpoint"): the emulated origin is on 127.0.0.1.
		"-filer.allowUntrustedRemoteEndpoints", "-s3.allowUntrustedRemoteEndpoints", "-volume.allowUntrustedRemoteEndpoints",
	}
	s3Addr := hostPort(ports[6])
	srv, err := StartProcess(ctx, bin, args, nil, s3Addr, filepath.Join(dir, "weed.log"), 120*time.Second)
	if err != nil {
		return nil, err
	}
	// weed names a server "host:port.grpcport" when the gRPC port is not
	// port+10000.
	s := &Seaweed{Server: srv, Endpoint: "http://" + s3Addr, bin: bin,
		master: hostPort(ports[0]) + "." + port(1), filer: hostPort(ports[4]) + "." + port(5), dir: dir}
	if err := s.waitWritable(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// waitWritable returns once the cluster has stored an object (in a
// bucket of its own, "ferry-ready"). A new master defers allocating
// volume ids for about 4 s after it starts, and until then the first
// read of a remote object waits for its volume instead of being cached:
// a tier that has run for a while has its volumes, and the first read of
// a test or a benchmark should find the same.
func (s *Seaweed) waitWritable(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = s.put(ctx, "/ferry-ready"); err == nil {
			if err = s.put(ctx, "/ferry-ready/probe"); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("seaweedfs took no write within 60 s: %w\n%s", err, tail(s.LogPath()))
}

// put makes an anonymous PUT of a few bytes to the S3 gateway (a bucket
// for "/bucket", an object for "/bucket/key").
func (s *Seaweed) put(ctx context.Context, path string) error {
	var body io.Reader
	if strings.Count(path, "/") > 1 {
		body = strings.NewReader("ready")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.Endpoint+path, body)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	// 409: the bucket is there already (an earlier try made it).
	if resp.StatusCode != http.StatusOK && !(body == nil && resp.StatusCode == http.StatusConflict) {
		return fmt.Errorf("PUT %s: %s: %s", path, resp.Status, msg)
	}
	return nil
}

// RemoteMount mirrors a bucket of an S3 origin under a filer directory,
// which the S3 gateway then serves as a bucket of the same name.
type RemoteMount struct {
	// Bucket on the origin, and the name the gateway serves it under.
	Bucket string
	// Endpoint, Region, AccessKey and SecretKey reach the origin.
	Endpoint, Region, AccessKey, SecretKey string
	// CacheWait is how long a read of an object not cached yet waits
	// for the whole object to be cached before it is served from the
	// origin instead; nil leaves SeaweedFS's default (2 to 10 s by the
	// object's size), 0 never waits.
	CacheWait *time.Duration
}

// MountRemote configures the origin and mounts m.Bucket at
// /buckets/BUCKET through `weed shell`. It retries while the cluster is
// still coming up (the filer and the first volume register after the S3
// port listens).
func (s *Seaweed) MountRemote(ctx context.Context, m RemoteMount) error {
	configure := fmt.Sprintf("remote.configure -name=origin -type=s3 -s3.access_key=%s -s3.secret_key=%s -s3.region=%s -s3.endpoint=%s",
		m.AccessKey, m.SecretKey, m.Region, m.Endpoint)
	mount := fmt.Sprintf("remote.mount -dir=/buckets/%s -remote=origin/%s", m.Bucket, m.Bucket)
	if m.CacheWait != nil {
		mount += " -cacheWait=" + m.CacheWait.String()
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := s.Shell(ctx, configure, mount)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("mounting origin bucket %q in seaweedfs: %w\n%s", m.Bucket, err, out)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// CacheRemote fills the tier with every object of the mounted bucket
// ahead of any reader (`remote.cache`). -deleteLocalExtra=false: the
// filer holds the bucket's prefixes as directories, which a listing of
// the bucket does not return, and remote.cache would otherwise try to
// delete them as gone from the bucket and fail ("fail to delete
// non-empty folder").
func (s *Seaweed) CacheRemote(ctx context.Context, bucket string) error {
	out, err := s.Shell(ctx, "remote.cache -deleteLocalExtra=false -dir=/buckets/"+bucket)
	if err != nil {
		return fmt.Errorf("remote.cache /buckets/%s: %w\n%s", bucket, err, out)
	}
	return nil
}

// Shell runs commands in `weed shell` and returns what it printed. The
// shell exits 0 whatever its commands did, so a line that reports an
// error is an error here.
func (s *Seaweed) Shell(ctx context.Context, commands ...string) (string, error) {
	cmd := exec.CommandContext(ctx, s.bin, "shell", "-master="+s.master, "-filer="+s.filer)
	cmd.Stdin = strings.NewReader(strings.Join(commands, "\n") + "\nexit\n")
	cmd.Dir = s.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), err
	}
	for _, line := range strings.Split(string(out), "\n") {
		l := strings.ToLower(line)
		if strings.Contains(l, "error") || strings.Contains(l, "failed") || strings.Contains(l, "reject") {
			return string(out), fmt.Errorf("weed shell: %s", strings.TrimSpace(line))
		}
	}
	return string(out), nil
}
