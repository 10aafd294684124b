package gcs

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"ferry/bucket"
)

// stallTransport fails a response body that sends nothing for timeout: it
// cancels the request, which unblocks the read. The storage library has
// no such timeout of its own, and http.Client.Timeout would bound the
// whole transfer, which a large healthy read may legitimately exceed.
//
// A stall is reported through the *atomic.Bool a caller put in the
// request's context with watchStalls, because the read itself then fails
// with context.Canceled, which must not be mistaken for the caller
// giving up.
type stallTransport struct {
	base    http.RoundTripper
	timeout time.Duration
}

// stallKey marks a context whose requests report stalls; its value is a
// *atomic.Bool.
type stallKey struct{}

// watchStalls returns ctx marked so that a stall of any of its requests'
// bodies sets the returned flag.
func watchStalls(ctx context.Context) (context.Context, *atomic.Bool) {
	stalled := new(atomic.Bool)
	return context.WithValue(ctx, stallKey{}, stalled), stalled
}

// stallError is what an operation whose body stalled returns: retryable,
// and not a cancellation.
func stallError(op, name string, timeout time.Duration) error {
	return fmt.Errorf("gcs: %s %q: no data from the store for %v: %w", op, name, timeout, bucket.ErrUnavailable)
}

func (t *stallTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	flag, _ := req.Context().Value(stallKey{}).(*atomic.Bool)
	b := &stallBody{body: resp.Body, cancel: cancel, flag: flag}
	b.timer = time.AfterFunc(t.timeout, b.expire)
	b.timer.Stop()
	b.timeout = t.timeout
	resp.Body = b
	return resp, nil
}

// stallBody arms a timer around every Read.
type stallBody struct {
	body    io.ReadCloser
	cancel  context.CancelFunc
	flag    *atomic.Bool // may be nil
	timeout time.Duration
	timer   *time.Timer

	closeOnce sync.Once
}

func (b *stallBody) expire() {
	if b.flag != nil {
		b.flag.Store(true)
	}
	b.cancel()
}

func (b *stallBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.timeout)
	n, err := b.body.Read(p)
	b.timer.Stop()
	return n, err
}

func (b *stallBody) Close() error {
	err := b.body.Close()
	b.closeOnce.Do(func() {
		b.timer.Stop()
		b.cancel()
	})
	return err
}
