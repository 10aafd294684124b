// Package metadata answers what a path of the bucket is (a file with the
// object version it holds, a directory, or nothing) and what a directory
// holds, from a cache in front of the store: positive and negative
// entries and complete listings, with one TTL (-1 keeps them forever, the
// setting for read-only datasets; 0 turns caching off). A directory is
// any prefix that has something under it; an object named "dir/" (a
// marker) also makes one.
//
// It knows nothing of FUSE (package fs shows its answers to the kernel)
// and never reads object bytes. It must never answer with what an older
// request learned when a newer one has answered, never show a name that
// escapes its directory ("..", "a//b"), and, while the store is down,
// keep answering for the names it knew rather than failing them.
package metadata

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"ferry/bucket"
)

// ErrInvalid is a configuration error (New).
var ErrInvalid = errors.New("invalid argument")

// Config is what a Cache needs.
type Config struct {
	// Bucket is listed and stat'ed. Required.
	Bucket bucket.Bucket
	// TTL applies to positive entries and listings, NegativeTTL to "no
	// such name" entries. -1 caches forever, 0 disables caching.
	TTL, NegativeTTL time.Duration
	// PageSize is the MaxResults hint of each List call; 0 lets the
	// store choose (typically 1000).
	PageSize int
	// ListAfterMisses is how many lookups in one directory the cache
	// could not answer start a background listing of it (prefetch.go):
	// 0 is 3, -1 never. Nothing is listed in the background when TTL is
	// 0 (there is nowhere to keep the listing).
	ListAfterMisses int
	// MemoryLimit bounds the bytes of the names and listings kept, with
	// what Charge adds (budget.go); 0 is no bound.
	MemoryLimit int64
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Registerer receives the metrics (ferry_fs_hidden_names_total,
	// ferry_fs_stale_metadata_total, ferry_metadata_bytes,
	// ferry_metadata_evictions_total) when set.
	Registerer prometheus.Registerer
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Cache is the metadata of one mount. All methods are safe for concurrent
// use.
type Cache struct {
	// Dependencies
	bucket bucket.Bucket
	log    *slog.Logger
	now    func() time.Time

	// Constant data
	ttl, negTTL time.Duration
	pageSize    int

	// Mutable state with its own synchronisation
	cache    *ttlCache
	prefetch *prefetcher
	resolves singleflight.Group // one fetch per name at a time
	outage   outage
	// hidden counts names hidden because they cannot be POSIX names.
	hidden       atomic.Uint64
	hiddenLogged atomic.Bool
	hiddenMetric prometheus.Counter // nil without a Registerer
}

// outage counts the answers given from expired metadata while the store
// could not be reached.
type outage struct {
	staleServed atomic.Uint64
	staleLogged atomic.Bool
}

// New returns the metadata cache of cfg.Bucket. Close stops its
// background listings.
func New(cfg Config) (*Cache, error) {
	if cfg.Bucket == nil {
		return nil, errors.New("metadata: Config.Bucket is required")
	}
	if cfg.MemoryLimit < 0 {
		return nil, fmt.Errorf("metadata: memory limit %d: %w", cfg.MemoryLimit, ErrInvalid)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cache{
		bucket:   cfg.Bucket,
		log:      cfg.Logger,
		now:      cfg.Now,
		ttl:      cfg.TTL,
		negTTL:   cfg.NegativeTTL,
		pageSize: cfg.PageSize,
		cache:    newTTLCache(cfg.TTL, cfg.NegativeTTL, cfg.Now, cfg.MemoryLimit),
	}
	c.prefetch = newPrefetcher(c, cfg.ListAfterMisses)
	if cfg.Registerer != nil {
		if err := c.register(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// BucketName is the bucket's Name, for logs and mount tables.
func (c *Cache) BucketName() string { return c.bucket.Name() }

// TTL is the positive entries' TTL (-1 forever, 0 off).
func (c *Cache) TTL() time.Duration { return c.ttl }

// register registers the cache's metrics.
func (c *Cache) register(reg prometheus.Registerer) error {
	c.hiddenMetric = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ferry_fs_hidden_names_total",
		Help: "Object names hidden because they cannot be POSIX names (empty component, '.', '..', NUL, > 255 bytes).",
	})
	stale := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ferry_fs_stale_metadata_total",
		Help: "Names answered from expired metadata because the store could not be reached.",
	}, func() float64 { return float64(c.outage.staleServed.Load()) })
	bytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ferry_metadata_bytes",
		Help: "Bytes of metadata held (names, listings, open directory handles' listings, and the kernel's inodes), against --metadata-limit.",
	}, func() float64 { return float64(c.Bytes()) })
	evicted := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ferry_metadata_evictions_total",
		Help: "Cached names and listings dropped to stay within --metadata-limit.",
	}, func() float64 { return float64(c.Evictions()) })
	for _, m := range []prometheus.Collector{c.hiddenMetric, stale, bytes, evicted} {
		if err := reg.Register(m); err != nil {
			return err
		}
	}
	return nil
}

// Charge adds n (negative to release) to the bytes held for names this
// cache answered but others keep (fs's inodes, Listers being read): they
// count against the memory limit, and the cache shrinks at once to leave
// them room.
func (c *Cache) Charge(n int64) {
	c.cache.budget.external.Add(n)
	if n <= 0 || c.cache.budget.limit == 0 {
		return
	}
	c.cache.mu.Lock()
	defer c.cache.mu.Unlock()
	if c.cache.budget.over(8) {
		c.cache.evictLocked()
	}
}

// Bytes is about the memory the metadata holds: the cache's entries and
// listings, and what Charge added.
func (c *Cache) Bytes() int64 {
	c.cache.mu.Lock()
	defer c.cache.mu.Unlock()
	return c.cache.budget.used + c.cache.budget.external.Load()
}

// Evictions counts the entries and listings dropped for the memory limit.
func (c *Cache) Evictions() uint64 {
	c.cache.mu.Lock()
	defer c.cache.mu.Unlock()
	return c.cache.budget.evicted
}

// MemoryLimit is the bound given in Config.
func (c *Cache) MemoryLimit() int64 { return c.cache.budget.limit }

// Close stops the background listings and waits for them.
func (c *Cache) Close() { c.prefetch.stop() }

// Hidden is how many times a name was hidden from a listing or a lookup
// because it cannot be a POSIX name.
func (c *Cache) Hidden() uint64 { return c.hidden.Load() }

// StaleServed is how many names were answered from expired metadata
// because the store could not be reached.
func (c *Cache) StaleServed() uint64 { return c.outage.staleServed.Load() }

// NoteHidden counts the object name path as hidden: a listing skipped it,
// or a lookup was refused, because it cannot be a POSIX name. The first
// is logged.
func (c *Cache) NoteHidden(path string) {
	c.hidden.Add(1)
	if m := c.hiddenMetric; m != nil {
		m.Inc()
	}
	if c.hiddenLogged.CompareAndSwap(false, true) {
		// Warn, once: the objects are in the bucket but not in the tree,
		// and at debug level nobody would learn why.
		c.log.Warn("hiding object names that cannot be POSIX names (logged once; see ferry_fs_hidden_names_total)",
			"example", path)
	}
}

// Listing returns a fresh complete listing of dir, if the cache has one.
func (c *Cache) Listing(dir string) (*Listing, bool) { return c.cache.listing(dir) }

// Newest returns the newest thing known about path, fresh or expired
// (while not swept away), if a request begun after seq learned it. A
// directory handle asks it so as never to hand out what is older than
// what a lookup has seen since its listing began.
func (c *Cache) Newest(path string, seq uint64) (Entry, bool) { return c.cache.newest(path, seq) }

// Refresh makes the next Resolve of path ask the store, whatever the TTL:
// the store proved the version known gone (a read pinned to it answered
// "changed" or "not found"). Until the store answers, the old answer
// stays the newest known (for an outage). The listing of path's parent
// is kept; it no longer answers for path.
func (c *Cache) Refresh(path string) { c.cache.stale(path) }

// Invalidate drops every entry and listing at or under p ("" for
// everything), and the listing of p's parent, which names p. Answers of
// requests in flight that began before are not cached when they arrive.
// It returns how many items it dropped.
func (c *Cache) Invalidate(p string) int { return c.cache.invalidate(p) }

// Resolve says what path is: a file (with its object), a directory or
// nothing (Kind None). A fresh cache entry answers without a request;
// otherwise Stat and a one-result List run concurrently, and concurrent
// resolves of one path share one fetch. If the store cannot be reached,
// an expired entry still answers (and is not renewed): a name the mount
// knew stays usable through an outage, and its bytes may be in the disk
// cache. (Once the store is known down, the store's stack fails requests
// at once: package retry's circuit breaker.) A cancelled ctx ends the
// wait at once with an error matching bucket.ErrCanceled; the shared
// fetch goes on for the others.
func (c *Cache) Resolve(ctx context.Context, path string) (Entry, error) {
	if e, ok := c.cache.lookup(path); ok {
		return e, nil
	}
	// Only requests begun since the last invalidation are joined.
	key := path + "\x00" + strconv.FormatUint(c.cache.generation(), 10)
	ch := c.resolves.DoChan(key, func() (any, error) { return c.fetchShared(ctx, path) })
	// An interrupted caller (Ctrl-C, FUSE interrupt) stops waiting at once;
	// the shared fetch goes on for the others and fills the cache.
	select {
	case r := <-ch:
		if r.Err != nil {
			return Entry{}, r.Err
		}
		return r.Val.(Entry), nil
	case <-ctx.Done():
		return Entry{}, fmt.Errorf("%w: resolving %q: %w", bucket.ErrCanceled, path, ctx.Err())
	}
}

// fetchShared is the fetch of path that concurrent resolves share.
func (c *Cache) fetchShared(ctx context.Context, path string) (any, error) {
	// A resolve that finished between our cache check and Do has
	// filled the cache already.
	if e, ok := c.cache.lookup(path); ok {
		return e, nil
	}
	dir, _ := SplitPath(path)
	c.prefetch.miss(dir)
	// The fetch is shared: one interrupted caller must not fail the
	// others, so it ignores cancellation (the store's own timeouts and
	// retries still bound it).
	seq := c.cache.begin()
	e, err := c.fetch(context.WithoutCancel(ctx), path)
	e.Seq = seq
	if err != nil {
		if old, ok := c.cache.newest(path, 0); ok && errors.Is(err, bucket.ErrUnavailable) {
			c.outage.staleServed.Add(1)
			if !c.outage.staleLogged.Swap(true) {
				c.log.Warn("store unavailable; answering from expired metadata (logged once)", "path", path, "err", err)
			}
			return old, nil
		}
		return Entry{}, err
	}
	c.cache.put(path, e)
	return e, nil
}

// fetch asks the store what path is. A directory wins over a file of the
// same name: "x" and "x/y" both existing shows only the directory x, since
// hiding the directory would hide everything below it.
func (c *Cache) fetch(ctx context.Context, path string) (Entry, error) {
	var (
		obj     *bucket.Object
		statErr error
		listing *bucket.Listing
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		obj, statErr = c.bucket.Stat(gctx, &bucket.StatRequest{Name: path})
		if errors.Is(statErr, bucket.ErrNotFound) {
			return nil // not an error: it may still be a directory
		}
		return statErr
	})
	g.Go(func() error {
		var err error
		listing, err = c.bucket.List(gctx, &bucket.ListRequest{
			Prefix: path + "/", Delimiter: "/", MaxResults: 1,
		})
		return err
	})
	err := g.Wait()
	if listing != nil && (len(listing.Objects) > 0 || len(listing.Prefixes) > 0) {
		return Entry{Kind: Dir}, nil
	}
	if err != nil {
		return Entry{}, err
	}
	if statErr == nil && obj != nil {
		return Entry{Kind: File, Obj: *obj}, nil
	}
	return Entry{Kind: None}, nil
}
