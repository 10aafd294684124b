package connect

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"

	"ferry/bucket"
	"ferry/bucket/prefix"
)

// Schemes ParseURL accepts.
const (
	SchemeGCS  = "gs"
	SchemeS3   = "s3"
	SchemeFile = "file"
)

// Location is a parsed bucket URL.
type Location struct {
	// Scheme is SchemeGCS, SchemeS3 or SchemeFile.
	Scheme string
	// Bucket is the bucket name (gs, s3); "" for file.
	Bucket string
	// Prefix is the sub-folder to mount, normalised by prefix.Clean to
	// end in "/" ("train/"), or "" for the whole bucket (gs, s3 only).
	Prefix string
	// Dir is the absolute, cleaned directory (file only).
	Dir string
}

// String is the canonical URL, e.g. "gs://data/train/" or "file:///srv/d".
func (l Location) String() string {
	if l.Scheme == SchemeFile {
		return (&url.URL{Scheme: SchemeFile, Path: l.Dir}).String()
	}
	return (&url.URL{Scheme: l.Scheme, Host: l.Bucket, Path: "/" + l.Prefix}).String()
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{bucket.ErrInvalid}, args...)...)
}

// ParseURL parses gs://bucket[/prefix], s3://bucket[/prefix] or
// file:///abs/dir. Every error matches bucket.ErrInvalid and says what to
// write instead. Credentials in the URL are refused: they would end up in
// logs and process listings.
func ParseURL(raw string) (Location, error) {
	if raw == "" {
		return Location{}, invalid("empty bucket URL: use gs://bucket, s3://bucket or file:///abs/dir")
	}
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the raw URL, which may hold secrets
		}
		return Location{}, invalid("malformed bucket URL: %v", err)
	}
	switch u.Scheme {
	case SchemeGCS, SchemeS3, SchemeFile:
	case "":
		return Location{}, invalid("bucket URL %q has no scheme: use gs://, s3:// or file:// (e.g. file:///abs/dir)", raw)
	default:
		return Location{}, invalid("unsupported scheme %q: use gs://, s3:// or file://", u.Scheme)
	}
	if u.User != nil {
		return Location{}, invalid("credentials in a %s:// URL are not supported: use the key file or credential options", u.Scheme)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return Location{}, invalid("bucket URL %q has a query or fragment: escape \"?\" as %%3F and \"#\" as %%23", raw)
	}
	if u.Opaque != "" {
		if u.Scheme == SchemeFile {
			return Location{}, invalid("file path %q is relative: use file:///abs/dir", u.Opaque)
		}
		return Location{}, invalid("malformed bucket URL %q: use %s://bucket[/prefix]", raw, u.Scheme)
	}
	if u.Scheme == SchemeFile {
		return parseFile(u)
	}

	loc := Location{Scheme: u.Scheme, Bucket: u.Host}
	if loc.Bucket == "" {
		return Location{}, invalid("bucket URL %q has an empty bucket name: use %s://bucket[/prefix]", raw, u.Scheme)
	}
	if err := validBucketName(u.Scheme, loc.Bucket); err != nil {
		return Location{}, err
	}
	p := strings.TrimPrefix(u.Path, "/")
	if strings.Contains(u.Path, "//") {
		return Location{}, invalid("prefix %q contains \"//\" (an empty path component)", p)
	}
	if loc.Prefix, err = prefix.Clean(p); err != nil {
		return Location{}, err
	}
	return loc, nil
}

func parseFile(u *url.URL) (Location, error) {
	if u.Host != "" && u.Host != "localhost" {
		return Location{}, invalid("file URL %q names host %q: file paths must be absolute, as in file:///abs/dir", u.String(), u.Host)
	}
	if u.Path == "" {
		return Location{}, invalid("file URL has no path: use file:///abs/dir")
	}
	if !filepath.IsAbs(u.Path) {
		return Location{}, invalid("file path %q is relative: use file:///abs/dir", u.Path)
	}
	return Location{Scheme: SchemeFile, Dir: filepath.Clean(u.Path)}, nil
}

// validBucketName applies the store's naming rules, so that a typo fails
// here with a reason rather than as a confusing 400 or 404 later.
// GCS: https://cloud.google.com/storage/docs/buckets#naming
// S3:  https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html
func validBucketName(scheme, name string) error {
	bad := func(why string) error {
		return invalid("invalid %s bucket name %q: %s", scheme, name, why)
	}
	if strings.Contains(name, ":") {
		return bad("a port is not part of a bucket name (use the endpoint option for a custom server)")
	}
	maxLen := 63
	if scheme == SchemeGCS && strings.Contains(name, ".") {
		maxLen = 222 // dotted GCS names; each component still <= 63
	}
	if len(name) < 3 || len(name) > maxLen {
		return bad(fmt.Sprintf("must be 3 to %d characters long", maxLen))
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
		case r == '_' && scheme == SchemeGCS:
		case r >= 'A' && r <= 'Z':
			return bad("bucket names are lowercase")
		default:
			return bad(fmt.Sprintf("character %q is not allowed", r))
		}
	}
	alnum := func(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }
	if !alnum(name[0]) || !alnum(name[len(name)-1]) {
		return bad("must start and end with a letter or digit")
	}
	if strings.Contains(name, "..") {
		return bad("must not contain \"..\"")
	}
	for _, c := range strings.Split(name, ".") {
		if len(c) > 63 {
			return bad("each dot-separated part must be at most 63 characters")
		}
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return bad("must not be an IP address")
	}
	if scheme == SchemeGCS && strings.HasPrefix(name, "goog") {
		return bad("must not start with \"goog\"")
	}
	return nil
}
