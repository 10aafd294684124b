package gcs

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/emulator"
)

// fakeGCS is a scripted stand-in for the two GCS endpoints the backend
// uses: JSON metadata (/storage/v1/...) and XML reads (/bucket/object).
type fakeGCS struct {
	json, xml http.HandlerFunc
	xmlHits   atomic.Int64
}

func newFake(t *testing.T, f *fakeGCS) *Bucket {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.URL.Path) >= len("/storage/v1/") && r.URL.Path[:len("/storage/v1/")] == "/storage/v1/" {
			f.json(w, r)
			return
		}
		f.xmlHits.Add(1)
		f.xml(w, r)
	}))
	t.Cleanup(srv.Close)
	b, err := New(t.Context(), Config{Bucket: "b", Endpoint: srv.URL, Anonymous: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func status(code int, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"error":{"code":%d,"message":"scripted"}}`, code)
	}
}

func TestErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		code  int
		want  error
		after time.Duration
	}{
		{http.StatusBadRequest, bucket.ErrInvalid, 0},
		{http.StatusUnauthorized, bucket.ErrPermission, 0},
		{http.StatusForbidden, bucket.ErrPermission, 0},
		{http.StatusNotFound, bucket.ErrNotFound, 0},
		{http.StatusPreconditionFailed, bucket.ErrPrecondition, 0},
		{http.StatusTooManyRequests, bucket.ErrUnavailable, 7 * time.Second},
		{http.StatusInternalServerError, bucket.ErrUnavailable, 0},
		{http.StatusBadGateway, bucket.ErrUnavailable, 0},
		{http.StatusServiceUnavailable, bucket.ErrUnavailable, 3 * time.Second},
	} {
		t.Run(strconv.Itoa(tc.code), func(t *testing.T) {
			var h http.HandlerFunc
			if tc.after > 0 {
				h = status(tc.code, "Retry-After", strconv.Itoa(int(tc.after/time.Second)))
			} else {
				h = status(tc.code)
			}
			f := &fakeGCS{json: h, xml: h}
			b := newFake(t, f)

			check := func(what string, err error) {
				t.Helper()
				require.ErrorIs(t, err, tc.want, what)
				after, ok := bucket.RetryAfter(err)
				assert.Equal(t, tc.after > 0, ok, "%s: Retry-After hint", what)
				assert.Equal(t, tc.after, after, what)
				assert.Equal(t, tc.want == bucket.ErrUnavailable, bucket.IsRetryable(err), what)
			}
			_, err := b.Stat(t.Context(), &bucket.StatRequest{Name: "o"})
			check("stat", err)
			_, err = b.List(t.Context(), &bucket.ListRequest{Delimiter: "/"})
			check("list", err)
			_, err = b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "o", Range: bucket.ByteRange{Limit: 10}})
			check("read", err)
			assert.Equal(t, int64(1), f.xmlHits.Load(), "the library must not retry by itself")
		})
	}
}

// TestUnreachableEndpoint: nothing listens on the port, so every call
// fails (quickly, thanks to the dial timeout) as retryable, not cancelled.
func TestUnreachableEndpoint(t *testing.T) {
	port, err := emulator.FreePort()
	require.NoError(t, err)
	b, err := New(t.Context(), Config{Bucket: "b", Endpoint: "http://127.0.0.1:" + strconv.Itoa(port), Anonymous: true})
	require.NoError(t, err)
	defer b.Close()
	// A bound for the test only; the dial fails long before.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	_, err = b.Stat(ctx, &bucket.StatRequest{Name: "o"})
	assert.ErrorIs(t, err, bucket.ErrUnavailable)
	assert.NotErrorIs(t, err, bucket.ErrCanceled)
	_, err = b.List(ctx, &bucket.ListRequest{})
	assert.ErrorIs(t, err, bucket.ErrUnavailable)
	// The request's URL without its dozen list parameters.
	require.Error(t, err)
	assert.Contains(t, err.Error(), `Get "http://127.0.0.1:`+strconv.Itoa(port)+`/storage/v1/b/b/o": dial tcp`)
	assert.NotContains(t, err.Error(), "?")
	_, err = b.NewRangeReader(ctx, &bucket.ReadRequest{Name: "o", Range: bucket.ByteRange{Limit: 1}})
	assert.ErrorIs(t, err, bucket.ErrUnavailable)
	assert.True(t, bucket.IsRetryable(err))
	_, err = b.Put(ctx, &bucket.PutRequest{Name: "o", Data: []byte("x")})
	assert.ErrorIs(t, err, bucket.ErrUnavailable)
}

// partial answers an XML ranged read of a 10-byte object like
// fake-gcs-server: it ignores preconditions and reports its generation.
func partial(gen string, body string, write func(w http.ResponseWriter, body string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Goog-Generation", gen)
		w.Header().Set("Content-Range", "bytes 0-9/10")
		write(w, body)
	}
}

func fullLength(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Length", "10")
	w.WriteHeader(http.StatusPartialContent)
	io.WriteString(w, body)
}

// TestPinnedReadChecksReportedGeneration: the server ignores
// x-goog-if-generation-match (as fake-gcs-server does) and serves another
// generation; the read must fail before any byte is handed out.
func TestPinnedReadChecksReportedGeneration(t *testing.T) {
	var gotCond atomic.Value
	f := &fakeGCS{xml: func(w http.ResponseWriter, r *http.Request) {
		gotCond.Store(r.Header.Get("X-Goog-If-Generation-Match"))
		partial("222", "0123456789", fullLength)(w, r)
	}}
	b := newFake(t, f)

	r, err := b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "o", Version: "111", Range: bucket.ByteRange{Limit: 10}})
	require.ErrorIs(t, err, bucket.ErrPrecondition)
	assert.Nil(t, r)
	assert.Equal(t, "111", gotCond.Load(), "the precondition is still sent, for real GCS")

	r, err = b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "o", Version: "222", Range: bucket.ByteRange{Limit: 10}})
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	r.Close()
	require.NoError(t, err)
	assert.Equal(t, "0123456789", string(got))
}

// TestBodyEndsEarly: a body cut off mid-stream is io.ErrUnexpectedEOF and
// ErrUnavailable, the bytes before the cut are right, and the library does
// not quietly reopen the read (the retry decorator owns that).
func TestBodyEndsEarly(t *testing.T) {
	for name, write := range map[string]func(http.ResponseWriter, string){
		// Content-Length promises 10 bytes, the connection closes after 5.
		"content-length": fullLength,
		// Chunked, ends cleanly after 5 of the 10 bytes Content-Range promised.
		"chunked": func(w http.ResponseWriter, body string) {
			w.WriteHeader(http.StatusPartialContent)
			io.WriteString(w, body)
			w.(http.Flusher).Flush()
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeGCS{xml: partial("5", "01234", write)}
			b := newFake(t, f)
			r, err := b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "o", Version: "5", Range: bucket.ByteRange{Limit: 10}})
			require.NoError(t, err)
			defer r.Close()
			got, err := io.ReadAll(r)
			require.ErrorIs(t, err, bucket.ErrUnavailable)
			require.ErrorIs(t, err, io.ErrUnexpectedEOF)
			assert.True(t, bucket.IsRetryable(err))
			assert.Equal(t, "01234", string(got))
			assert.Equal(t, int64(1), f.xmlHits.Load(), "no transparent reopen")
			_, err = r.Read(make([]byte, 1))
			assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "the error is sticky")
		})
	}
}

// TestKeyFile: a service account key is used to fetch a token (from the
// key's token_uri, here a local fake) that is then sent on every request.
func TestKeyFile(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	tokenSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"access_token":"test-token","token_type":"Bearer","expires_in":3600}`)
	}))
	defer tokenSrv.Close()
	sa, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "p", "private_key_id": "k1",
		"private_key": string(pemKey), "client_email": "sa@p.iam.gserviceaccount.com",
		"client_id": "1", "token_uri": tokenSrv.URL,
	})
	require.NoError(t, err)
	keyFile := filepath.Join(t.TempDir(), "key.json")
	require.NoError(t, os.WriteFile(keyFile, sa, 0o600))

	var auth, userProject atomic.Value
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		userProject.Store(r.URL.Query().Get("userProject"))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"name":"o","bucket":"b","size":"3","generation":"42","crc32c":"AAAAAQ=="}`)
	}))
	defer api.Close()

	b, err := New(t.Context(), Config{Bucket: "b", Endpoint: api.URL, KeyFile: keyFile, BillingProject: "payer"})
	require.NoError(t, err)
	defer b.Close()
	o, err := b.Stat(t.Context(), &bucket.StatRequest{Name: "o"})
	require.NoError(t, err)
	assert.Equal(t, "Bearer test-token", auth.Load())
	assert.Equal(t, "payer", userProject.Load(), "BillingProject is the user project")
	assert.Equal(t, "42", o.Version)
	assert.Equal(t, uint64(3), o.Size)
	assert.Equal(t, uint32(1), o.CRC32C)
	assert.True(t, o.HasCRC32C)
}

func TestTransportLimits(t *testing.T) {
	tr := newBaseTransport(5, DefaultDialTimeout, DefaultResponseHeaderTimeout)
	assert.Zero(t, tr.MaxConnsPerHost, "lookups must not queue behind reads: readahead bounds the reads")
	assert.Equal(t, 5, tr.MaxIdleConnsPerHost)
	assert.NotZero(t, tr.ResponseHeaderTimeout, "a hung server must not hold a read forever")
}
