package gcs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"

	"ferry/bucket"
)

// mapError is the one place that translates the library's and net/http's
// errors into ferry's sentinels. The original error stays wrapped for logs.
func mapError(ctx context.Context, op, name string, err error) error {
	if err == nil {
		return nil
	}
	// The first url.Error is the storage request's own (a token fetch
	// that fails is wrapped inside it).
	err = bucket.TrimURL(err)
	if ctx.Err() != nil {
		return bucket.ContextError(ctx, fmt.Errorf("gcs: %s %q: %w", op, name, err))
	}
	sentinel, retryAfter := classify(err)
	if sentinel == nil {
		return fmt.Errorf("gcs: %s %q: %w", op, name, err)
	}
	return bucket.WithRetryAfter(fmt.Errorf("gcs: %s %q: %w: %w", op, name, sentinel, err), retryAfter)
}

// classify picks the sentinel for err (nil if none applies) and any
// Retry-After hint.
func classify(err error) (error, time.Duration) {
	var gerr *googleapi.Error
	var nerr net.Error
	var aerr *auth.Error
	switch {
	case errors.As(err, &aerr) && aerr.Response != nil:
		// The token endpoint answered (it comes wrapped in *url.Error, a
		// net.Error, so this goes first): 4xx is a refused credential (a
		// revoked or disabled key, invalid_grant), which retrying will not
		// change; 429 and 5xx are the endpoint's own trouble.
		switch c := aerr.Response.StatusCode; {
		case c == http.StatusTooManyRequests, c == http.StatusRequestTimeout, c >= 500:
			return bucket.ErrUnavailable, retryAfter(aerr.Response.Header)
		case c >= 400:
			return bucket.ErrPermission, 0
		}
		return nil, 0
	case errors.Is(err, storage.ErrObjectNotExist), errors.Is(err, storage.ErrBucketNotExist):
		return bucket.ErrNotFound, 0
	case errors.As(err, &gerr):
		switch c := gerr.Code; {
		case c == http.StatusNotFound:
			return bucket.ErrNotFound, 0
		case c == http.StatusPreconditionFailed:
			return bucket.ErrPrecondition, 0
		case c == http.StatusUnauthorized, c == http.StatusForbidden:
			return bucket.ErrPermission, 0
		case c == http.StatusTooManyRequests, c == http.StatusRequestTimeout, c >= 500:
			return bucket.ErrUnavailable, retryAfter(gerr.Header)
		case c >= 400:
			return bucket.ErrInvalid, 0
		}
		return nil, 0
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Not the caller's context (mapError checked it): a timeout
		// inside the transport.
		return bucket.ErrUnavailable, 0
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.EPIPE), errors.As(err, &nerr):
		// *url.Error (every failed http.Client.Do) is a net.Error too.
		return bucket.ErrUnavailable, 0
	}
	return nil, 0
}

// retryAfter parses a Retry-After header (seconds or an HTTP date).
func retryAfter(h http.Header) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t)
	}
	return 0
}

// isClassified reports whether err already matches one of the sentinels.
func isClassified(err error) bool {
	for _, s := range []error{bucket.ErrNotFound, bucket.ErrPrecondition, bucket.ErrPermission,
		bucket.ErrUnavailable, bucket.ErrCanceled, bucket.ErrInvalid} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
