package bucket

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestRetryAfter(t *testing.T) {
	base := fmt.Errorf("503: %w", ErrUnavailable)
	err := WithRetryAfter(base, 2*time.Second)
	d, ok := RetryAfter(fmt.Errorf("wrapped: %w", err))
	assert.True(t, ok)
	assert.Equal(t, 2*time.Second, d)
	assert.ErrorIs(t, err, ErrUnavailable, "the hint keeps the sentinel")
	assert.Equal(t, base.Error(), err.Error())

	_, ok = RetryAfter(base)
	assert.False(t, ok)
	assert.Same(t, base, WithRetryAfter(base, 0), "no hint, no wrapper")
	assert.NoError(t, WithRetryAfter(nil, time.Second))
}

func TestContextErrorAndRetryable(t *testing.T) {
	unavailable := fmt.Errorf("reset: %w", ErrUnavailable)
	assert.True(t, IsRetryable(unavailable))
	assert.False(t, IsRetryable(fmt.Errorf("x: %w", ErrNotFound)))

	live := context.Background()
	assert.Same(t, unavailable, ContextError(live, unavailable))
	assert.NoError(t, ContextError(live, nil))

	done, cancel := context.WithCancel(context.Background())
	cancel()
	err := ContextError(done, unavailable)
	assert.ErrorIs(t, err, ErrCanceled)
	assert.ErrorIs(t, err, ErrUnavailable, "the cause stays visible")
	assert.False(t, IsRetryable(err), "a cancelled call is never retried")
	already := fmt.Errorf("x: %w", ErrCanceled)
	assert.Same(t, already, ContextError(done, already))
	assert.True(t, errors.Is(ContextError(done, errors.New("eof")), ErrCanceled))
}

// TestTrimURL: the query goes from the URL the first *url.Error in the
// chain shows; the rest of the message and the chain stay, and the error
// given is not changed (it may be shared: -race checks the goroutines).
func TestTrimURL(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	const long = "http://h:1/storage/v1/b/x/o?alt=json&prefix=a%2Fb&maxResults=1"
	uerr := &url.Error{Op: "Get", URL: long, Err: dial}
	shared := WithRetryAfter(uerr, time.Second)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := TrimURL(shared)
			assert.Equal(t, `Get "http://h:1/storage/v1/b/x/o": dial tcp: connection refused`, err.Error())
			_, ok := RetryAfter(err)
			assert.True(t, ok)
			var got *url.Error
			assert.True(t, errors.As(err, &got))
			assert.ErrorIs(t, err, dial)
		}()
	}
	wg.Wait()
	assert.Equal(t, long, uerr.URL, "the shared error is not changed")
	assert.Contains(t, shared.Error(), "maxResults=1")

	// Only the first url.Error: an inner one (a token fetch, say) keeps
	// its query.
	inner := &url.Error{Op: "Post", URL: "http://meta/token?scopes=s", Err: dial}
	outer := &url.Error{Op: "Get", URL: "http://h/o?alt=json", Err: inner}
	assert.Equal(t, `Get "http://h/o": Post "http://meta/token?scopes=s": dial tcp: connection refused`, TrimURL(outer).Error())

	// Under a wrapper that formatted its message already.
	wrapped := fmt.Errorf("gcs: list: %w", uerr)
	assert.Equal(t, `gcs: list: Get "http://h:1/storage/v1/b/x/o": dial tcp: connection refused`, TrimURL(wrapped).Error())

	// No url.Error, or no query: the same error.
	plain := errors.New("x?y=1")
	assert.Same(t, plain, TrimURL(plain))
	bare := &url.Error{Op: "Get", URL: "http://h/p", Err: dial}
	assert.Same(t, bare, TrimURL(bare))
	assert.Nil(t, TrimURL(nil))
}

// Without versions, a rewrite of the same size is told by Updated.
func TestSameVersion(t *testing.T) {
	a := Object{Name: "a", Size: 3, Updated: time.Unix(1, 0)}
	b := a
	assert.True(t, a.SameVersion(&b))
	b.Updated = time.Unix(2, 0)
	assert.False(t, a.SameVersion(&b))
	a.Version, b.Version = "v1", "v1"
	assert.True(t, a.SameVersion(&b), "a version says it all")
	b.Version = "v2"
	assert.False(t, a.SameVersion(&b))
}
