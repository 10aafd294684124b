package fs

import (
	"sync"
	"time"

	"ferry/bucket"
)

// kind says what a name is in the bucket.
type kind uint8

const (
	// kindNone: nothing by that name (a negative entry).
	kindNone kind = iota
	kindFile
	kindDir
)

func (k kind) String() string {
	switch k {
	case kindFile:
		return "file"
	case kindDir:
		return "dir"
	}
	return "none"
}

// entry is what one name resolves to. obj is meaningful for kindFile only.
// seq orders what entries say: it is taken from metaCache.begin when the
// request that learned it began, so of two answers the one whose request
// began later wins, whichever was stored last (a listing that began before
// an overwrite can land after a Stat that saw it). 0 is "unordered".
type entry struct {
	kind kind
	obj  bucket.Object
	seq  uint64
}

// dirEntry is one child in a directory listing.
type dirEntry struct {
	name string // one valid component
	entry
}

// expiry is when a cached item stops being fresh. forever is the -1 TTL.
type expiry struct {
	at      time.Time
	forever bool
}

type cachedEntry struct {
	e   entry // e.seq orders it
	exp expiry
}

type cachedListing struct {
	entries []dirEntry     // each with the listing's seq
	byName  map[string]int // index into entries
	exp     expiry
	seq     uint64 // when the listing's first page was asked for
}

// metaCache holds positive and negative name entries and complete directory
// listings, each with a TTL: -1 keeps them forever (read-only datasets), 0
// disables caching, a positive TTL expires them. A fresh listing answers
// lookups of its children, positively and negatively, so `ls` followed by
// `stat` of every file costs one listing and no Stat.
//
// metaCache.mu is a leaf lock: nothing else is locked while holding it.
type metaCache struct {
	// Dependencies
	now func() time.Time

	// Constant data
	ttl    time.Duration // MetadataTTL: positive entries and listings
	negTTL time.Duration // NegativeTTL: negative entries

	// Mutable state
	mu       sync.Mutex
	entries  map[string]cachedEntry   // GUARDED_BY(mu); key: object path without trailing "/"
	listings map[string]cachedListing // GUARDED_BY(mu); key: directory path ("" = root)
	puts     int                      // GUARDED_BY(mu); puts since the last sweep of expired items
	seq      uint64                   // GUARDED_BY(mu); stamps requests in the order they begin
	// floors: an invalidation of a prefix at seq drops every answer under
	// it from a request that began before (still in flight when it ran).
	floors   map[string]uint64 // GUARDED_BY(mu)
	floorMax uint64            // GUARDED_BY(mu); the greatest floor
	gen      uint64            // GUARDED_BY(mu); invalidations so far
}

func newMetaCache(ttl, negTTL time.Duration, now func() time.Time) *metaCache {
	return &metaCache{
		now:      now,
		ttl:      ttl,
		negTTL:   negTTL,
		entries:  make(map[string]cachedEntry),
		listings: make(map[string]cachedListing),
		floors:   make(map[string]uint64),
	}
}

// maxFloors bounds the invalidation floors kept; past it they collapse
// into one for everything (dropping every answer then in flight).
const maxFloors = 1024

// belowFloor reports whether an answer about path (a listing of it, if
// listing) from a request that began at seq predates an invalidation
// covering it.
//
// LOCKS_REQUIRED(c.mu)
func (c *metaCache) belowFloor(path string, seq uint64, listing bool) bool {
	if seq > c.floorMax {
		return false // begun after the last invalidation: the usual case
	}
	for p, f := range c.floors {
		if seq > f {
			continue
		}
		if under(path, p) {
			return true
		}
		// A listing of path names its invalidated children as they were.
		if parent, _ := splitPath(p); listing && p != "" && parent == path {
			return true
		}
	}
	return false
}

// generation changes with every invalidation: a request joins only
// in-flight requests of the same generation.
func (c *metaCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// expiryFor returns when an item cached now with ttl expires, and false if
// ttl disables caching.
func (c *metaCache) expiryFor(ttl time.Duration) (expiry, bool) {
	switch {
	case ttl < 0:
		return expiry{forever: true}, true
	case ttl == 0:
		return expiry{}, false
	}
	return expiry{at: c.now().Add(ttl)}, true
}

// LOCKS_REQUIRED(c.mu)
func (c *metaCache) fresh(e expiry) bool {
	return e.forever || c.now().Before(e.at)
}

// begin stamps a request about to be made: its answer's seq.
func (c *metaCache) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return c.seq
}

// lookup returns the cached entry for path, from a name entry or from the
// parent's fresh listing: of the two, what the later request learned. A
// name entry newer than the listing, even expired, means the listing can
// no longer answer for that name.
func (c *metaCache) lookup(path string) (entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ce, hasEntry := c.entries[path]
	dir, name := splitPath(path)
	l, hasListing := c.listings[dir]
	if hasListing && (!hasEntry || l.seq > ce.e.seq) {
		// The listing is newer: it answers while fresh, and once expired
		// the older name entry cannot answer either.
		return l.answer(name), c.fresh(l.exp)
	}
	return ce.e, hasEntry && c.fresh(ce.exp)
}

// newest returns the newest thing known about path, fresh or not (while
// not swept away), from a name entry or the parent's listing, if a
// request begun after seq learned it: for readdirplus, never to hand out
// what is older than what a lookup has seen; with seq 0, for answering
// when the store cannot.
func (c *metaCache) newest(path string, seq uint64) (entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	best, found := entry{}, false
	if ce, ok := c.entries[path]; ok && ce.e.seq > seq {
		best, found = ce.e, true
	}
	dir, name := splitPath(path)
	if l, ok := c.listings[dir]; ok && l.seq > seq && (!found || l.seq > best.seq) {
		best, found = l.answer(name), true
	}
	return best, found
}

// answer is what the listing says about name.
func (l *cachedListing) answer(name string) entry {
	if i, ok := l.byName[name]; ok {
		return l.entries[i].entry
	}
	return entry{kind: kindNone, seq: l.seq}
}

// put caches what path resolved to, unless the cache already holds what a
// later request learned (e.seq 0 counts as now).
func (c *metaCache) put(path string, e entry) {
	ttl := c.ttl
	if e.kind == kindNone {
		ttl = c.negTTL
	}
	exp, ok := c.expiryFor(ttl)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.seq == 0 {
		c.seq++
		e.seq = c.seq
	}
	if ce, ok := c.entries[path]; ok && ce.e.seq > e.seq {
		return // a later request's answer is here already
	}
	dir, _ := splitPath(path)
	if l, ok := c.listings[dir]; (ok && l.seq > e.seq) || c.belowFloor(path, e.seq, false) {
		return // a later listing, or an invalidation, supersedes it
	}
	if !ok {
		// Caching is off, but an older entry must not outlive what we
		// just learned, nor an older listing answer again: keep it,
		// already expired, as a tombstone that outranks the listing.
		if l, listed := c.listings[dir]; listed && c.fresh(l.exp) {
			c.entries[path] = cachedEntry{e: e, exp: expiry{at: c.now()}}
			c.maybeSweep()
		} else {
			delete(c.entries, path)
		}
		return
	}
	c.entries[path] = cachedEntry{e: e, exp: exp}
	c.maybeSweep()
}

// listing returns a fresh complete listing of dir. The slice is shared:
// callers must not modify it.
func (c *metaCache) listing(dir string) ([]dirEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.listings[dir]
	if !ok || !c.fresh(l.exp) {
		return nil, false
	}
	return l.entries, true
}

// listingAt returns a fresh complete listing of dir, like listing, and
// the index of name in it.
func (c *metaCache) listingAt(dir, name string) ([]dirEntry, int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.listings[dir]
	if !ok || !c.fresh(l.exp) {
		return nil, 0, false
	}
	i, ok := l.byName[name]
	return l.entries, i, ok
}

// putListing caches a complete listing of dir whose first page was asked
// for at seq (every entry carries it). It takes ownership of entries.
func (c *metaCache) putListing(dir string, entries []dirEntry, seq uint64) {
	exp, ok := c.expiryFor(c.ttl)
	if !ok {
		return
	}
	byName := make(map[string]int, len(entries))
	for i, e := range entries {
		byName[e.name] = i
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.listings[dir]; ok && l.seq > seq {
		return // a listing that began later is cached already
	}
	if c.belowFloor(dir, seq, true) {
		return // invalidated while it was being read
	}
	c.listings[dir] = cachedListing{entries: entries, byName: byName, exp: exp, seq: seq}
	// Name entries of the children that are older than this listing: drop
	// them, the listing answers for them now. Newer ones stay, and answer
	// (see lookup).
	for _, e := range entries {
		p := childPath(dir, e.name)
		if ce, ok := c.entries[p]; ok && ce.e.seq < seq {
			delete(c.entries, p)
		}
	}
	c.maybeSweep()
}

// maybeSweep drops expired items now and then so a positive TTL does not
// grow the maps without bound.
//
// LOCKS_REQUIRED(c.mu)
func (c *metaCache) maybeSweep() {
	c.puts++
	if c.puts < 4096 || c.puts < len(c.entries)+len(c.listings) {
		return
	}
	c.puts = 0
	for k, v := range c.entries {
		if c.fresh(v.exp) {
			continue
		}
		// An expired entry newer than its directory's fresh listing still
		// says that the listing cannot answer for this name.
		dir, _ := splitPath(k)
		if l, ok := c.listings[dir]; ok && c.fresh(l.exp) && l.seq < v.e.seq {
			continue
		}
		delete(c.entries, k)
	}
	for k, v := range c.listings {
		if !c.fresh(v.exp) {
			delete(c.listings, k)
		}
	}
}
