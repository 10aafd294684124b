package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"ferry/bucket"
)

// translate is the one place SDK and transport errors become bucket
// sentinels. The SDK error stays wrapped for logs; it carries status,
// error code and request ids, never credentials.
func (b *Bucket) translate(ctx context.Context, op, name string, err error) error {
	if err == nil {
		return nil
	}
	// A request that was sent (or tried to be): its URL's query is the
	// SDK's parameters. Before it is sent, a url.Error is a credential
	// provider's, whose query says which account failed.
	var sendErr *smithyhttp.RequestSendError
	if errors.As(err, &sendErr) {
		err = bucket.TrimURL(err)
	}
	sentinel := classify(err)
	hint := ""
	if region := bucketRegion(err); region != "" {
		hint = " (the bucket is in region " + region + ")"
	}
	var out error
	if sentinel != nil {
		out = fmt.Errorf("s3: %s %s/%s%s: %w: %w", op, b.name, name, hint, sentinel, err)
	} else {
		out = fmt.Errorf("s3: %s %s/%s%s: %w", op, b.name, name, hint, err)
	}
	if sentinel == bucket.ErrUnavailable {
		out = bucket.WithRetryAfter(out, retryAfter(err, time.Now()))
	}
	return bucket.ContextError(ctx, out)
}

// classify picks the sentinel for err, or nil when none applies.
func classify(err error) error {
	// The error code is more specific than the status (AWS sends 400
	// RequestTimeout, 503 SlowDown); HEAD responses have no body and so
	// only a status, for which the SDK invents codes like "NotFound".
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "NoSuchKey", "NoSuchBucket", "NotFound":
			return bucket.ErrNotFound
		case "PreconditionFailed":
			return bucket.ErrPrecondition
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
			"ExpiredToken", "InvalidToken", "AllAccessDisabled", "AccountProblem":
			return bucket.ErrPermission
		case "PermanentRedirect", "AuthorizationHeaderMalformed":
			return bucket.ErrInvalid // wrong region: retrying cannot help
		case "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout",
			"RequestTimeTooSkewed", "TooManyRequests", "Throttling", "ThrottlingException":
			return bucket.ErrUnavailable
		}
	}
	if code := statusCode(err); code != 0 {
		switch {
		case code == http.StatusNotFound:
			return bucket.ErrNotFound
		case code == http.StatusPreconditionFailed:
			return bucket.ErrPrecondition
		case code == http.StatusUnauthorized || code == http.StatusForbidden:
			return bucket.ErrPermission
		case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
			return bucket.ErrUnavailable
		case code == http.StatusMovedPermanently || // HEAD in the wrong region
			code == http.StatusRequestedRangeNotSatisfiable || code == http.StatusBadRequest:
			return bucket.ErrInvalid
		}
		return nil
	}
	// No HTTP response: the request never completed, or the body broke.
	var sendErr *smithyhttp.RequestSendError
	var netErr net.Error
	var readTimeout *awshttp.ResponseTimeoutError
	var deserErr *smithy.DeserializationError
	switch {
	case errors.As(err, &sendErr), errors.As(err, &netErr), errors.As(err, &readTimeout),
		errors.As(err, &deserErr), // a truncated or garbled reply
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		// Deadlines of our own (not the caller's, see ContextError).
		errors.Is(err, context.DeadlineExceeded):
		return bucket.ErrUnavailable
	}
	return nil
}

// statusCode is the HTTP status of the response behind err, or 0.
func statusCode(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// retryAfter reads a Retry-After header (seconds or HTTP date) from the
// response behind err; 0 when absent.
func retryAfter(err error, now time.Time) time.Duration {
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil {
		return 0
	}
	v := re.Response.Header.Get("Retry-After")
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		return time.Duration(max(secs, 0)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// bucketRegion is the x-amz-bucket-region AWS sends with a wrong-region
// error, or "".
func bucketRegion(err error) string {
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil {
		return ""
	}
	return re.Response.Header.Get("X-Amz-Bucket-Region")
}
