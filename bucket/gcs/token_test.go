package gcs

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

// TestTokenEndpointRefusal: a key the token endpoint refuses (revoked or
// disabled: 400 invalid_grant, 401) is a permission error, not retried and
// not EIO; the endpoint's own 5xx is worth retrying.
func TestTokenEndpointRefusal(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	for code, want := range map[int]error{400: bucket.ErrPermission, 401: bucket.ErrPermission, 503: bucket.ErrUnavailable} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				_, _ = io.WriteString(w, `{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`)
			}))
			defer tokens.Close()
			sa, err := json.Marshal(map[string]string{
				"type": "service_account", "project_id": "p", "private_key_id": "k1",
				"private_key": string(pemKey), "client_email": "sa@p.iam.gserviceaccount.com",
				"client_id": "1", "token_uri": tokens.URL,
			})
			require.NoError(t, err)
			keyFile := filepath.Join(t.TempDir(), "key.json")
			require.NoError(t, os.WriteFile(keyFile, sa, 0o600))
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				t.Errorf("a request reached the API without a token: %s", r.URL)
			}))
			defer api.Close()

			b, err := New(t.Context(), Config{Bucket: "b", Endpoint: api.URL, KeyFile: keyFile})
			require.NoError(t, err)
			defer b.Close()
			_, err = b.Stat(t.Context(), &bucket.StatRequest{Name: "o"})
			require.Error(t, err)
			assert.ErrorIs(t, err, want)
			assert.Equal(t, errors.Is(want, bucket.ErrUnavailable), bucket.IsRetryable(err))
		})
	}
}

// TestNoCredentials: with no credentials anywhere, New says so once and
// matches ErrNoCredentials (the command line names --anonymous for it);
// credentials that are named but broken keep the library's reason.
func TestNoCredentials(t *testing.T) {
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	t.Setenv("CLOUDSDK_CONFIG", t.TempDir())
	t.Setenv("GCE_METADATA_HOST", "")
	b, err := New(t.Context(), Config{Bucket: "b"})
	if err == nil {
		b.Close()
		t.Skip("this machine has credentials (a metadata server): nothing to test")
	}
	assert.ErrorIs(t, err, ErrNoCredentials)
	assert.ErrorIs(t, err, bucket.ErrPermission)
	assert.Equal(t, "gcs: no credentials found (no GOOGLE_APPLICATION_CREDENTIALS, no gcloud application default credentials, not on Google Cloud)", err.Error())

	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "missing.json"))
	_, err = New(t.Context(), Config{Bucket: "b"})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNoCredentials)
	assert.ErrorIs(t, err, bucket.ErrPermission)
	assert.Contains(t, err.Error(), "missing.json", "the library says what is wrong with the file named")
}
