package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/fs"
)

// fakeFS is a mounted file system as the server sees it.
type fakeFS struct {
	calls  []string // "invalidate PATH", "cached PATH"
	cached fs.CachedFile
	err    error
}

func (f *fakeFS) Invalidate(_ context.Context, p string) (fs.InvalidateResult, error) {
	f.calls = append(f.calls, "invalidate "+p)
	return fs.InvalidateResult{Path: strings.Trim(p, "/"), CacheItems: 3, KernelEntries: 2}, f.err
}

func (f *fakeFS) Cached(_ context.Context, p string) (fs.CachedFile, error) {
	f.calls = append(f.calls, "cached "+p)
	return f.cached, f.err
}

// fakeCache is a disk cache holding objects of 10 bytes each.
type fakeCache struct {
	names   []string
	dropped []string
}

func (c *fakeCache) Drop(match func(name string) bool) (int, int64) {
	var kept []string
	for _, n := range c.names {
		if match(n) {
			c.dropped = append(c.dropped, n)
		} else {
			kept = append(kept, n)
		}
	}
	c.names = kept
	return len(c.dropped), 10 * int64(len(c.dropped))
}

func newFakeServer(f *fakeFS, cache *fakeCache) *Server {
	c := &Server{log: slog.New(slog.DiscardHandler), fs: f}
	if cache != nil {
		c.cache = cache
	}
	return c
}

// TestServerRequests: how the daemon answers each request, and what it
// asks of the file system and the disk cache for it.
func TestServerRequests(t *testing.T) {
	ctx := context.Background()
	objects := []string{"a", "a/b", "a/bc", "ab", "z/a"}

	f := &fakeFS{}
	resp := newFakeServer(f, nil).do(ctx, &request{Op: "launch"})
	assert.Equal(t, response{Error: `unknown op "launch"`}, resp)
	assert.Empty(t, f.calls, "the file system is not asked")

	f = &fakeFS{cached: fs.CachedFile{Bytes: 5, Size: 8, OpenedAhead: true}}
	resp = newFakeServer(f, nil).do(ctx, &request{Op: "cached", Path: "/a/b"})
	assert.Equal(t, response{Path: "/a/b", CachedBytes: 5, Size: 8, OpenedAhead: true}, resp)
	assert.Equal(t, []string{"cached /a/b"}, f.calls)
	f = &fakeFS{cached: fs.CachedFile{NoCache: true}}
	assert.True(t, newFakeServer(f, nil).do(ctx, &request{Op: "cached", Path: "/a"}).NoCache)
	f = &fakeFS{err: errors.New(`fs: "a" is not a file`)}
	assert.Equal(t, response{Error: `fs: "a" is not a file`}, newFakeServer(f, nil).do(ctx, &request{Op: "cached", Path: "/a"}))

	// Metadata only: the disk cache is left alone.
	f, cache := &fakeFS{}, &fakeCache{names: objects}
	resp = newFakeServer(f, cache).do(ctx, &request{Op: "invalidate", Path: "/a"})
	assert.Equal(t, response{Path: "/a", CacheItems: 3, KernelEntries: 2}, resp)
	assert.Equal(t, []string{"invalidate /a"}, f.calls)
	assert.Empty(t, cache.dropped)

	// With data: the objects at or under the path, not those beside it.
	resp = newFakeServer(f, cache).do(ctx, &request{Op: "invalidate", Path: "/a", Data: true})
	assert.Equal(t, response{Path: "/a", CacheItems: 3, KernelEntries: 2, DataEntries: 3, DataBytes: 30}, resp)
	assert.Equal(t, []string{"a", "a/b", "a/bc"}, cache.dropped)
	cache = &fakeCache{names: objects}
	resp = newFakeServer(f, cache).do(ctx, &request{Op: "invalidate", Path: "/", Data: true})
	assert.Equal(t, 5, resp.DataEntries, "the mount point: everything")
	assert.Equal(t, "/", resp.Path)

	// No disk cache: the metadata is dropped all the same, and said so.
	resp = newFakeServer(&fakeFS{}, nil).do(ctx, &request{Op: "invalidate", Path: "/a", Data: true})
	assert.Equal(t, response{Path: "/a", CacheItems: 3, KernelEntries: 2,
		Error: "the mount has no disk cache (--cache-dir): metadata invalidated, no data to drop"}, resp)

	// The file system fails: no data is dropped.
	f, cache = &fakeFS{err: fs.ErrNotMounted}, &fakeCache{names: objects}
	resp = newFakeServer(f, cache).do(ctx, &request{Op: "invalidate", Path: "/a", Data: true})
	assert.Equal(t, "fs: not mounted", resp.Error)
	assert.Empty(t, cache.dropped)
}

// TestServerDevice: once mounted, a request meant for another mount on
// the same mount point is refused without asking anything.
func TestServerDevice(t *testing.T) {
	ctx := context.Background()
	f := &fakeFS{}
	c := newFakeServer(f, nil)
	c.dev.Store("0:50")
	resp := c.do(ctx, &request{Op: "cached", Path: "/a", Dev: "0:51"})
	assert.Equal(t, "this control socket serves another mount (device 0:50, not 0:51): the ferry mounted there now has none; restart it", resp.Error)
	assert.Empty(t, f.calls)
	c.do(ctx, &request{Op: "cached", Path: "/a", Dev: "0:50"})
	c.do(ctx, &request{Op: "cached", Path: "/b"}) // a client that does not say
	assert.Equal(t, []string{"cached /a", "cached /b"}, f.calls)

	// Not mounted yet (or no device seen): every request is served.
	f = &fakeFS{}
	newFakeServer(f, nil).do(ctx, &request{Op: "cached", Path: "/a", Dev: "0:51"})
	assert.Equal(t, []string{"cached /a"}, f.calls)
}

// TestServerHandle: one JSON request per connection, one JSON response;
// a request that is not JSON gets an error, not silence.
func TestServerHandle(t *testing.T) {
	c := newFakeServer(&fakeFS{cached: fs.CachedFile{Bytes: 1, Size: 2}}, nil)
	for _, tc := range []struct{ send, want string }{
		{`{"op":"cached","path":"/f"}`, `{"path":"/f","cache_items":0,"kernel_entries":0,"data_entries":0,"data_bytes":0,"cached_bytes":1,"size":2}`},
		{`not json`, `{"error":"bad request: invalid character 'o' in literal null (expecting 'u')","cache_items":0,"kernel_entries":0,"data_entries":0,"data_bytes":0,"cached_bytes":0,"size":0}`},
	} {
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer server.Close()
			c.handle(server)
		}()
		_, err := fmt.Fprintln(client, tc.send)
		require.NoError(t, err)
		var got json.RawMessage
		require.NoError(t, json.NewDecoder(client).Decode(&got))
		assert.JSONEq(t, tc.want, string(got), tc.send)
		client.Close()
		<-done
	}
}
