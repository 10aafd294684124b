package emulator

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Test credentials of the emulator's root user. They guard nothing but a
// loopback port that lives as long as one test binary.
const (
	s3AccessKey = "ferry-test-access"
	s3SecretKey = "ferry-test-secret-0123456789abcdef"
	s3Region    = "us-east-1"
)

// S3 is a running versitygw serving a local directory through the S3 API.
type S3 struct {
	*Server
	// Endpoint is the base URL ("http://127.0.0.1:port"). The gateway
	// only understands path-style addressing.
	Endpoint string
	// AccessKey and SecretKey are the root user's static credentials.
	AccessKey, SecretKey string
	// Region the gateway signs for.
	Region string
	// Root is the posix backend's directory: each bucket is a
	// subdirectory, each object a file under it (ETags live in xattrs).
	Root string

	client *s3.Client
}

// StartS3 runs versitygw on a free loopback port with its posix backend
// rooted at dir (created if missing; its filesystem must support user
// xattrs). The caller must Stop it. The gateway's log is dir/.versitygw.log; versitygw only
// treats directories under the root as buckets, so the file is ignored.
func StartS3(ctx context.Context, dir string) (*S3, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	bin, err := Binary(ctx, VersityGW)
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	addr := hostPort(port)
	args := []string{
		"--port", addr,
		"--access", s3AccessKey,
		"--secret", s3SecretKey,
		"--region", s3Region,
		// Real S3 keeps connections alive; without this the gateway
		// sets DisableKeepalive and closes each one after a request.
		"--keep-alive",
		"--quiet",
		"posix", dir,
	}
	// Clear the environment variables versitygw also reads for the root
	// user and region, so a developer's shell cannot override the flags.
	env := []string{"ROOT_ACCESS_KEY_ID=", "ROOT_ACCESS_KEY=", "ROOT_SECRET_ACCESS_KEY=", "ROOT_SECRET_KEY=", "VGW_REGION="}
	srv, err := StartProcess(ctx, bin, args, env, addr, filepath.Join(dir, ".versitygw.log"), 60*time.Second)
	if err != nil {
		return nil, err
	}
	e := &S3{
		Server:    srv,
		Endpoint:  "http://" + addr,
		AccessKey: s3AccessKey,
		SecretKey: s3SecretKey,
		Region:    s3Region,
		Root:      dir,
	}
	e.client = s3.New(s3.Options{
		Region:       s3Region,
		BaseEndpoint: aws.String(e.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s3AccessKey, s3SecretKey, ""),
		HTTPClient:   &http.Client{Timeout: 30 * time.Second},
	})
	return e, nil
}

// CreateBucket creates an empty bucket through the S3 API (so the gateway
// records its owner and ACL, which a bare mkdir under Root would not).
// Creating a bucket that exists is an error, as on the GCS emulator.
func (e *S3) CreateBucket(ctx context.Context, name string) error {
	if _, err := e.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return fmt.Errorf("creating bucket %q on versitygw: %w", name, err)
	}
	return nil
}

// BucketDir is the directory holding the bucket's objects. Stage objects
// through the S3 API, not by writing here: versitygw keeps ETags in xattrs
// that only its API sets, so a file written directly has no ETag and a
// file changed directly keeps its old one (Version would lie).
func (e *S3) BucketDir(name string) string {
	return filepath.Join(e.Root, name)
}

// NewS3ForTest starts versitygw in a temporary directory and stops it when
// the test ends, failing the test if it cannot start.
func NewS3ForTest(t TB) *S3 {
	t.Helper()
	e, err := StartS3(t.Context(), t.TempDir())
	if err != nil {
		t.Fatalf("starting versitygw: %v", err)
	}
	t.Cleanup(func() { _ = e.Stop() })
	return e
}
