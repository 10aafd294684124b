package emulator

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGCS checks what the gcs backend relies on: buckets can be created,
// objects uploaded through the JSON API are stored on disk under dir, and
// XML-API ranged reads on Endpoint are routed (they need -public-host).
func TestGCS(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	g, err := StartGCS(ctx, dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Stop() })

	require.NoError(t, g.CreateBucket(ctx, "emu-test"))
	require.Error(t, g.CreateBucket(ctx, "emu-test"), "creating an existing bucket must fail")

	up, err := http.NewRequestWithContext(ctx, http.MethodPost,
		g.Endpoint+"/upload/storage/v1/b/emu-test/o?uploadType=media&name=dir/obj", strings.NewReader("hello, gcs"))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(up)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	get, err := http.NewRequestWithContext(ctx, http.MethodGet, g.Endpoint+"/emu-test/dir/obj", nil)
	require.NoError(t, err)
	get.Header.Set("Range", "bytes=7-9")
	resp, err = http.DefaultClient.Do(get)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusPartialContent, resp.StatusCode)
	assert.Equal(t, "gcs", string(body))
	assert.NotEmpty(t, resp.Header.Get("X-Goog-Generation"))

	// Filesystem backend: the bucket is a directory under dir/data.
	st, err := os.Stat(filepath.Join(dir, "data", "emu-test"))
	require.NoError(t, err)
	assert.True(t, st.IsDir())

	pid := g.Pid()
	require.NoError(t, g.Stop())
	require.NoError(t, g.Stop(), "Stop is idempotent")
	assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "process must be gone after Stop")
}

func TestNewGCSForTest(t *testing.T) {
	var g *GCS
	t.Run("inner", func(t *testing.T) {
		g = NewGCSForTest(t)
		require.NoError(t, g.CreateBucket(t.Context(), "helper"))
		// In memory, a directory marker is an object like any other.
		resp, err := http.Post(g.Endpoint+"/upload/storage/v1/b/helper/o?uploadType=media&name=dir/", "", strings.NewReader(""))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		resp, err = http.Get(g.Endpoint + "/storage/v1/b/helper/o/dir%2F")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	})
	// The inner test's cleanup stopped the server.
	_, err := http.Get(g.Endpoint + "/storage/v1/b")
	assert.Error(t, err)
}
