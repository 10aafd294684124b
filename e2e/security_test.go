package e2e

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCacheFilePermissions: every cache file is 0600 and every cache
// directory 0700: cached data is readable only by the user running ferry.
func TestCacheFilePermissions(t *testing.T) {
	s := newStore(t, "gcs")
	objs := dataset(t, s, "p", 4, 300<<10)
	cacheDir := filepath.Join(t.TempDir(), "cache") // created by ferry
	m := mount(t, s, "--cache-dir", cacheDir)
	readAll(t, m, objs)
	m.unmount(t)
	files := 0
	err := filepath.WalkDir(cacheDir, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		info, err := d.Info()
		require.NoError(t, err)
		if d.IsDir() {
			assert.Equal(t, fs.FileMode(0o700), info.Mode().Perm(), "directory %s", p)
		} else {
			files++
			assert.Equal(t, fs.FileMode(0o600), info.Mode().Perm(), "file %s", p)
		}
		return nil
	})
	require.NoError(t, err)
	assert.Greater(t, files, len(objs), "data files and the index")
}

// TestHostileObjectNames: object names that look like paths out of the
// mount or the cache ("../", absolute, backslashes, dot components) are
// read (or hidden) without any file appearing outside the cache
// directory, and the cache only ever holds hash-named files.
func TestHostileObjectNames(t *testing.T) {
	s := newStore(t, "gcs") // the in-memory emulator holds any name
	escapes := []string{
		"../../ferry-escape-1", "/ferry-escape-2", "a/../../ferry-escape-3", "../", "..",
		"%2e%2e/ferry-escape-4", `..\..\ferry-escape-5`, "/tmp/ferry-escape-6", "a/./../ferry-escape-7",
		"./ferry-escape-8", "ok/../../../../../../tmp/ferry-escape-9", "ferry-escape-10/..",
	}
	for _, n := range escapes {
		s.put(t, n, []byte("evil "+n))
	}
	s.put(t, "fine/ok", []byte("fine"))
	parent := t.TempDir()
	cacheDir := filepath.Join(parent, "cache")
	m := mount(t, s, "--cache-dir", cacheDir, "--metadata-ttl", "-1")

	read := 0
	err := filepath.WalkDir(m.dir, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if d.Type().IsRegular() {
			data, err := os.ReadFile(p)
			require.NoError(t, err, p)
			rel, _ := filepath.Rel(m.dir, p)
			// What is shown is exactly the object of that name.
			if rel != "fine/ok" {
				assert.Equal(t, "evil "+rel, string(data), p)
			}
			read++
		}
		return nil
	})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, read, 2, "the valid names are readable")
	m.unmount(t)

	ents, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Len(t, ents, 1, "only the cache directory may exist next to it")
	hashName := regexp.MustCompile(`^[0-9a-f]{2,}$`)
	err = filepath.WalkDir(cacheDir, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, _ := filepath.Rel(cacheDir, p)
		assert.NotContains(t, rel, "escape", "an object name became a cache path")
		if d.Type().IsRegular() && filepath.Base(filepath.Dir(filepath.Dir(p))) == "data" {
			assert.Regexp(t, hashName, d.Name())
		}
		return nil
	})
	require.NoError(t, err)
	for _, p := range []string{"/ferry-escape-2", "/tmp/ferry-escape-6", "/tmp/ferry-escape-9",
		filepath.Join(parent, "..", "ferry-escape-1"), filepath.Join(m.dir, "..", "ferry-escape-1")} {
		_, err := os.Stat(p)
		assert.ErrorIs(t, err, os.ErrNotExist, p)
	}
}

// requireNoSecret fails if the log contains any of the secrets.
func requireNoSecret(t *testing.T, m *mounted, secrets ...string) {
	t.Helper()
	logs, err := os.ReadFile(m.log)
	require.NoError(t, err)
	require.NotEmpty(t, logs)
	for _, s := range secrets {
		require.NotEmpty(t, s)
		if strings.Contains(string(logs), s) {
			t.Fatalf("the log contains a secret (%.6s...)", s)
		}
	}
}

// TestSecretsNotLogged: with --debug, through failures and retries, the
// log never shows the S3 secret key, the GCS key file's private key, an
// OAuth token or request signatures.
func TestSecretsNotLogged(t *testing.T) {
	t.Run("s3", func(t *testing.T) {
		s := newStore(t, "s3")
		objs := dataset(t, s, "d", 2, 1<<20)
		p, via := newFaultProxy(t, s)
		m := mount(t, via, "--debug", "--store-timeout", "2s")
		p.setFault(fault{kind: faultStatus, status: 500, times: 1})
		readAll(t, m, objs)
		_, err := os.Stat(filepath.Join(m.dir, "missing"))
		require.ErrorIs(t, err, os.ErrNotExist)
		m.unmount(t)
		require.Positive(t, p.injected.Load())
		requireNoSecret(t, m, s3Emu.SecretKey, "X-Amz-Signature", "Signature=", "AWS4-HMAC-SHA256 Credential")
	})
	t.Run("gcs key file", func(t *testing.T) {
		s := newStore(t, "gcs")
		objs := dataset(t, s, "d", 2, 1<<20)
		const token = "ya29.ferry-test-access-token-do-not-log"
		tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"access_token": token, "token_type": "Bearer", "expires_in": 3600})
		}))
		defer tokens.Close()
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		require.NoError(t, err)
		der, err := x509.MarshalPKCS8PrivateKey(key)
		require.NoError(t, err)
		pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
		keyID := "0123456789abcdef0123456789abcdef01234567"
		sa, err := json.Marshal(map[string]string{
			"type": "service_account", "project_id": "ferry-test", "private_key_id": keyID,
			"private_key": pemKey, "client_email": "ferry@ferry-test.iam.gserviceaccount.com",
			"client_id": "1234567890", "token_uri": tokens.URL + "/token",
		})
		require.NoError(t, err)
		keyFile := filepath.Join(t.TempDir(), "key.json")
		require.NoError(t, os.WriteFile(keyFile, sa, 0o600))

		withKey := *s
		withKey.args = nil
		for i := 0; i < len(s.args); i++ {
			if s.args[i] != "--anonymous" {
				withKey.args = append(withKey.args, s.args[i])
			}
		}
		withKey.args = append(withKey.args, "--key-file", keyFile)
		m := mount(t, &withKey, "--debug")
		readAll(t, m, objs)
		m.unmount(t)
		pemBody := strings.Split(pemKey, "\n")[5] // a line from inside the key
		requireNoSecret(t, m, pemBody, keyID, token, "Bearer ", "eyJhbGci")
	})
}

// mountOptions returns the per-mount and super options of the mount on
// dir from /proc/self/mountinfo.
func mountOptions(t *testing.T, dir string) (mnt, super []string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[4] != dir {
			continue
		}
		mnt = strings.Split(f[5], ",")
		for i, x := range f {
			if x == "-" && i+3 < len(f) {
				super = strings.Split(f[i+3], ",")
			}
		}
	}
	require.NotNil(t, mnt, "%s is not mounted", dir)
	return mnt, super
}

// TestMountIsPrivateByDefault: allow_other is off unless asked for, the
// kernel checks permissions (default_permissions), and the mount is
// read-only, nosuid and nodev.
func TestMountIsPrivateByDefault(t *testing.T) {
	s := newStore(t, "file")
	s.put(t, "f", []byte("x"))
	m := mount(t, s)
	mnt, super := mountOptions(t, m.dir)
	assert.Contains(t, mnt, "ro")
	assert.Contains(t, mnt, "nosuid")
	assert.Contains(t, mnt, "nodev")
	assert.Contains(t, super, "default_permissions")
	assert.NotContains(t, super, "allow_other")
	m.unmount(t)

	m = mount(t, s, "--allow-other")
	_, super = mountOptions(t, m.dir)
	assert.Contains(t, super, "allow_other")
	assert.Contains(t, super, "default_permissions")
}

// TestBadInputFailsCleanly: bad flags, sizes, URLs and mount points, and
// buckets that do not exist, are not permitted or cannot be reached: one
// clear line, a non-zero exit, nothing mounted and no daemon left.
func TestBadInputFailsCleanly(t *testing.T) {
	require.NoError(t, startEmulators())
	src := t.TempDir()
	full := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(full, "x"), nil, 0o644))
	gcsArgs := []string{"--endpoint", "http://" + gcsProxy.Addr, "--anonymous"}
	s3Args := []string{"--endpoint", "http://" + s3Proxy.Addr, "--s3-path-style", "--region", s3Emu.Region}
	good := []string{"AWS_ACCESS_KEY_ID=" + s3Emu.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3Emu.SecretKey}
	bad := []string{"AWS_ACCESS_KEY_ID=" + s3Emu.AccessKey, "AWS_SECRET_ACCESS_KEY=wrong" + s3Emu.SecretKey}
	s3Store := newStore(t, "s3")
	for _, tc := range []struct {
		name string
		args []string // the last is the mount point, or "" for a fresh empty one
		env  []string
		want string
	}{
		{"unknown flag", []string{"--frobnicate", "file://" + src, ""}, nil, "frobnicate"},
		{"bad size", []string{"--memory-limit", "12 parsecs", "file://" + src, ""}, nil, "--memory-limit"},
		{"size too small", []string{"--memory-limit", "1KiB", "file://" + src, ""}, nil, "below the minimum"},
		{"bad duration", []string{"--store-timeout", "0", "file://" + src, ""}, nil, "--store-timeout"},
		{"not a URL", []string{"bucket-without-scheme", ""}, nil, "not a URL"},
		{"no bucket", []string{"gs://", ""}, nil, "no bucket"},
		{"bad scheme", []string{"ftp://host/x", ""}, nil, "scheme"},
		{"bad endpoint", []string{"--endpoint", "localhost:9000", "s3://b", ""}, nil, "--endpoint"},
		{"missing mount point", []string{"file://" + src, filepath.Join(src, "nope")}, nil, "does not exist"},
		{"mount point not a directory", []string{"file://" + src, filepath.Join(full, "x")}, nil, "not a directory"},
		{"mount point not empty", []string{"file://" + src, full}, nil, "not empty"},
		{"missing gcs bucket", append(gcsArgs, "gs://no-such-bucket-ferry", ""), nil, "not found"},
		{"missing s3 bucket", append(s3Args, "s3://no-such-bucket-ferry", ""), good, "not found"},
		{"s3 permission denied", append(s3Args, s3Store.url, ""), bad, "permission denied"},
		{"store unreachable", []string{"--endpoint", "http://127.0.0.1:1", "--anonymous", "gs://some-bucket", ""}, nil, "127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{}, tc.args...)
			dir := args[len(args)-1]
			if dir == "" {
				dir = t.TempDir()
				args[len(args)-1] = dir
			}
			cmd := exec.Command(ferryBin, args...)
			cmd.Env = append(os.Environ(), tc.env...)
			var out []byte
			err := within(readBound, func() error {
				var err error
				out, err = cmd.CombinedOutput()
				return err
			})
			require.NotErrorIs(t, err, errTimeout, "ferry hung")
			require.Error(t, err, "%s", out)
			msg := strings.TrimSpace(string(out))
			t.Logf("%s", msg)
			assert.Contains(t, strings.ToLower(msg), strings.ToLower(tc.want))
			assert.NotContains(t, msg, "\n", "want one line")
			assert.False(t, isMounted(dir), "nothing may be mounted")
			assert.Zero(t, daemonPID(dir), "no daemon may be left")
		})
	}

	// --nonempty is the way to mount over files anyway.
	s := newStore(t, "file")
	s.put(t, "f", []byte("x"))
	m := mountAt(t, s, full, "--nonempty")
	requireSameFile(t, filepath.Join(m.dir, "f"), []byte("x"))
}
