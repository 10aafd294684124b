package gcs

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

// TestStalledBodyFails: a body that goes silent fails the read, flags the
// stall, and the error is retryable rather than a cancellation.
func TestStalledBodyFails(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.Write(make([]byte, 10))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)

	rt := &stallTransport{base: newBaseTransport(2, time.Second, time.Second), timeout: 200 * time.Millisecond}
	ctx, stalled := watchStalls(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	require.Error(t, err)
	assert.Equal(t, int64(10), n)
	assert.True(t, stalled.Load(), "the stall must be reported")

	serr := stallError("read", "x", rt.timeout)
	assert.True(t, bucket.IsRetryable(serr))
	assert.NotErrorIs(t, serr, context.Canceled)
}

// TestHealthyBodyIsNotAStall: a slow but steady body is read to the end,
// and closing it does not flag a stall.
func TestHealthyBodyIsNotAStall(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "50")
		for range 5 {
			w.Write(make([]byte, 10))
			w.(http.Flusher).Flush()
			time.Sleep(50 * time.Millisecond)
		}
	}))
	defer srv.Close()
	rt := &stallTransport{base: newBaseTransport(2, time.Second, time.Second), timeout: 500 * time.Millisecond}
	ctx, stalled := watchStalls(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Len(t, b, 50)
	assert.False(t, stalled.Load())
}
