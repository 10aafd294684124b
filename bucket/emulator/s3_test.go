package emulator

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestS3 checks what the s3 backend relies on: buckets are created through
// the API as directories under dir, objects are files, ranged GETs work
// with the fixed root credentials and wrong credentials are refused.
func TestS3(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	e, err := StartS3(ctx, dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Stop() })

	require.NoError(t, e.CreateBucket(ctx, "emu-test"))
	require.Error(t, e.CreateBucket(ctx, "emu-test"), "creating an existing bucket must fail")

	_, err = e.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("emu-test"), Key: aws.String("dir/obj"),
		Body: bytes.NewReader([]byte("hello, s3")),
	})
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(e.BucketDir("emu-test"), "dir", "obj"))
	require.NoError(t, err)
	assert.Equal(t, "hello, s3", string(got), "posix backend stores objects as plain files")

	out, err := e.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String("emu-test"), Key: aws.String("dir/obj"), Range: aws.String("bytes=7-8"),
	})
	require.NoError(t, err)
	body, err := io.ReadAll(out.Body)
	out.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, "s3", string(body))
	assert.Equal(t, "bytes 7-8/9", aws.ToString(out.ContentRange))

	// A client with the wrong secret is refused.
	bad := s3.New(s3.Options{
		Region:       e.Region,
		BaseEndpoint: aws.String(e.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(e.AccessKey, "wrong", ""),
	})
	_, err = bad.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("emu-test"), Key: aws.String("dir/obj")})
	require.Error(t, err)

	pid := e.Pid()
	require.NoError(t, e.Stop())
	require.NoError(t, e.Stop(), "Stop is idempotent")
	assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "process must be gone after Stop")
}

func TestNewS3ForTest(t *testing.T) {
	e := NewS3ForTest(t)
	require.NoError(t, e.CreateBucket(t.Context(), "helper-test"))
	st, err := os.Stat(e.BucketDir("helper-test"))
	require.NoError(t, err)
	assert.True(t, st.IsDir())
}
