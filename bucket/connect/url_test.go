package connect

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want Location
	}{
		{"gs://data", Location{Scheme: "gs", Bucket: "data"}},
		{"gs://data/", Location{Scheme: "gs", Bucket: "data"}},
		{"gs://data/train", Location{Scheme: "gs", Bucket: "data", Prefix: "train/"}},
		{"gs://data/train/", Location{Scheme: "gs", Bucket: "data", Prefix: "train/"}},
		{"gs://data/a/b/c", Location{Scheme: "gs", Bucket: "data", Prefix: "a/b/c/"}},
		{"GS://data/x", Location{Scheme: "gs", Bucket: "data", Prefix: "x/"}},
		{"gs://my_bucket.example.com", Location{Scheme: "gs", Bucket: "my_bucket.example.com"}},
		{"gs://data/with%20space", Location{Scheme: "gs", Bucket: "data", Prefix: "with space/"}},
		{"gs://data/q%3Fmark", Location{Scheme: "gs", Bucket: "data", Prefix: "q?mark/"}},
		{"s3://my-bucket", Location{Scheme: "s3", Bucket: "my-bucket"}},
		{"s3://my.bucket.1/x/y/", Location{Scheme: "s3", Bucket: "my.bucket.1", Prefix: "x/y/"}},
		{"s3://abc/..x", Location{Scheme: "s3", Bucket: "abc", Prefix: "..x/"}},
		{"file:///srv/data", Location{Scheme: "file", Dir: "/srv/data"}},
		{"file:///srv/data/", Location{Scheme: "file", Dir: "/srv/data"}},
		{"file:///", Location{Scheme: "file", Dir: "/"}},
		{"file://localhost/srv/data", Location{Scheme: "file", Dir: "/srv/data"}},
		{"file:/srv/data", Location{Scheme: "file", Dir: "/srv/data"}},
		{"file:///srv/a/../b", Location{Scheme: "file", Dir: "/srv/b"}},
		{"file:///srv/my%20data", Location{Scheme: "file", Dir: "/srv/my data"}},
	} {
		got, err := ParseURL(tc.raw)
		if assert.NoError(t, err, tc.raw) {
			assert.Equal(t, tc.want, got, tc.raw)
		}
	}
}

func TestParseURLErrors(t *testing.T) {
	for _, tc := range []struct {
		raw     string
		message string // a piece of the error text the user needs to see
	}{
		// malformed
		{"", "empty bucket URL"},
		{"gs://da ta", "malformed"},
		{"%zz", "malformed"},
		{"gs:data", "use gs://bucket"},
		{"gs://data/x?y=1", "%3F"},
		{"gs://data/x#frag", "%23"},
		{"s3://key:secret@bucket/x", "credentials"},
		// scheme
		{"ftp://host/x", `unsupported scheme "ftp": use gs://, s3:// or file://`},
		{"http://bucket", `unsupported scheme "http"`},
		{"/srv/data", "no scheme"},
		{"data/train", "no scheme"},
		// bucket name
		{"gs://", "empty bucket name"},
		{"gs:///train", "empty bucket name"},
		{"s3://", "empty bucket name"},
		{"gs://ab", "3 to 63"},
		{"s3://" + strings.Repeat("a", 64), "3 to 63"},
		{"gs://" + strings.Repeat("a", 64) + ".b", "at most 63"},
		{"gs://Data", "lowercase"},
		{"s3://MyBucket", "lowercase"},
		{"s3://my_bucket", `'_'`},
		{"gs://da%21ta", "malformed"},
		{"gs://-data", "start and end"},
		{"s3://data-", "start and end"},
		{"s3://a..b", `".."`},
		{"s3://192.168.1.10", "IP address"},
		{"gs://goog-data", `"goog"`},
		{"gs://data:443/x", "port"},
		// prefix
		{"gs://data//train", `"//"`},
		{"gs://data/a//b", `"//"`},
		{"gs://data/a/../b", `".."`},
		{"s3://data/..", `".."`},
		{"s3://data/./x", `"."`},
		// file
		{"file://relative/dir", "absolute"},
		{"file:relative/dir", "relative"},
		{"file://", "no path"},
	} {
		_, err := ParseURL(tc.raw)
		if assert.ErrorIs(t, err, bucket.ErrInvalid, "%q", tc.raw) {
			assert.Contains(t, err.Error(), tc.message, "%q", tc.raw)
		}
	}
}

func TestParseURLNeverEchoesSecrets(t *testing.T) {
	for _, raw := range []string{
		"s3://AKIDEXAMPLE:s3cr3tvalue@bucket/x",
		"gs://AKIDEXAMPLE:s3cr3tvalue@bu cket", // malformed as well
	} {
		_, err := ParseURL(raw)
		require.Error(t, err)
		assert.NotContains(t, err.Error(), "s3cr3tvalue")
	}
}

func TestLocationString(t *testing.T) {
	for _, raw := range []string{"gs://data/", "gs://data/train/", "s3://b-1/a/b/", "file:///srv/my%20data"} {
		loc, err := ParseURL(raw)
		require.NoError(t, err)
		assert.Equal(t, raw, loc.String())
		again, err := ParseURL(loc.String())
		require.NoError(t, err)
		assert.Equal(t, loc, again, "String round-trips")
	}
}
