package fs

import (
	"errors"

	"ferry/bucket"
)

// isStoreError reports whether err carries one of the store's sentinels:
// then the sentinel, not any errno wrapped deeper (a socket's
// ECONNREFUSED), decides what the reader sees.
func isStoreError(err error) bool {
	for _, s := range []error{bucket.ErrCanceled, bucket.ErrNotFound, bucket.ErrPrecondition,
		bucket.ErrPermission, bucket.ErrUnavailable, bucket.ErrInvalid} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
