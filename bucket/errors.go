package bucket

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors. Backends translate their SDK's errors into these once,
// wrapping with %w so the original stays visible in logs; callers test
// with errors.Is. fs maps them to errno in one place.
var (
	// ErrNotFound: the object (or bucket) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrPrecondition: the object changed since the version the read was
	// pinned to.
	ErrPrecondition = errors.New("object changed (precondition failed)")
	// ErrPermission: credentials missing or not allowed.
	ErrPermission = errors.New("permission denied")
	// ErrUnavailable: a transient failure (5xx, 429, reset, timeout,
	// short body) that is worth retrying.
	ErrUnavailable = errors.New("store unavailable")
	// ErrCanceled: the caller's context was cancelled or expired.
	ErrCanceled = errors.New("canceled")
	// ErrInvalid: the request or configuration is malformed.
	ErrInvalid = errors.New("invalid argument")
)

// retryAfterError carries a store's Retry-After hint along with the error.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// WithRetryAfter attaches a Retry-After hint (from a 429 or 503 response)
// to err. The retry decorator waits at least that long before trying again.
func WithRetryAfter(err error, after time.Duration) error {
	if err == nil || after <= 0 {
		return err
	}
	return &retryAfterError{err: err, after: after}
}

// RetryAfter returns the hint attached by WithRetryAfter, if any.
func RetryAfter(err error) (time.Duration, bool) {
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return ra.after, true
	}
	return 0, false
}

// ContextError returns err wrapped so that it matches ErrCanceled when ctx
// is done, and err unchanged otherwise. Backends call it on every error so
// that a cancelled read is never mistaken for an unavailable store.
func ContextError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil && !errors.Is(err, ErrCanceled) {
		return errors.Join(ErrCanceled, err)
	}
	return err
}

// IsRetryable reports whether err is worth retrying: ErrUnavailable and
// not a cancellation.
func IsRetryable(err error) bool {
	return errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrCanceled)
}

// TrimURL returns err with the query left out of the URL that the first
// *url.Error in its chain shows (every failed http.Client.Do makes one).
// A listing's URL carries a dozen parameters, which made a dead store's
// one-line error several hundred characters long; method, host and path
// still say which request failed. The caller makes sure that url.Error
// is its own request's: a credential provider's query names the account
// and role that failed, and is kept. err itself is not changed (SDKs
// share some errors between goroutines); the result wraps it, so
// errors.Is and errors.As see the same chain.
func TrimURL(err error) error {
	var uerr *url.Error
	if !errors.As(err, &uerr) {
		return err
	}
	u, perr := url.Parse(uerr.URL)
	if perr != nil || u.RawQuery == "" && !u.ForceQuery {
		return err
	}
	u.RawQuery, u.ForceQuery = "", false
	msg := err.Error()
	// url.Error quotes its URL with %q.
	short := strings.Replace(msg, strconv.Quote(uerr.URL), strconv.Quote(u.String()), 1)
	if short == msg {
		return err
	}
	return &trimmedError{err: err, msg: short}
}

// trimmedError is err with another message.
type trimmedError struct {
	err error
	msg string
}

func (e *trimmedError) Error() string { return e.msg }
func (e *trimmedError) Unwrap() error { return e.err }
