package metadata

import (
	"sync"
	"time"

	"ferry/bucket"
)

// Kind says what a name is in the bucket.
type Kind uint8

const (
	// None: nothing by that name (a negative entry).
	None Kind = iota
	File
	Dir
)

func (k Kind) String() string {
	switch k {
	case File:
		return "file"
	case Dir:
		return "dir"
	}
	return "none"
}

// Entry is what one name resolves to. Obj is meaningful for File only.
// Seq orders what entries say: it is taken when the request that learned
// it began, so of two answers the one whose request began later wins,
// whichever was stored last (a listing that began before an overwrite
// can land after a Stat that saw it). 0 is "unordered".
type Entry struct {
	Kind Kind
	Obj  bucket.Object
	Seq  uint64
}

// DirEntry is one child in a directory listing.
type DirEntry struct {
	Name string // one valid component
	Entry
}

// expiry is when a cached item stops being fresh. forever is the -1 TTL.
type expiry struct {
	at      time.Time
	forever bool
}

type cachedEntry struct {
	e   Entry // e.Seq orders it
	exp expiry
}

// ttlCache holds positive and negative name entries and complete directory
// listings, each with a TTL: -1 keeps them forever (read-only datasets), 0
// disables caching, a positive TTL expires them. A fresh listing answers
// lookups of its children, positively and negatively, so `ls` followed by
// `stat` of every file costs one listing and no Stat; its negative answers
// (a name it does not hold) follow the negative TTL, as other negative
// answers do, so that a name created after the listing is found.
//
// ttlCache.mu is a leaf lock: nothing else is locked while holding it.
type ttlCache struct {
	// Dependencies
	now func() time.Time

	// Constant data
	ttl    time.Duration // positive entries and listings
	negTTL time.Duration // negative entries

	// Mutable state
	mu       sync.Mutex
	entries  map[string]cachedEntry // GUARDED_BY(mu); key: object path without trailing "/"
	listings map[string]*Listing    // GUARDED_BY(mu); key: directory path ("" = root)
	puts     int                    // GUARDED_BY(mu); puts since the last sweep of expired items
	seq      uint64                 // GUARDED_BY(mu); stamps requests in the order they begin
	// floors: an invalidation of a prefix at seq drops every answer under
	// it from a request that began before (still in flight when it ran).
	floors   map[string]uint64 // GUARDED_BY(mu)
	floorMax uint64            // GUARDED_BY(mu); the greatest floor
	gen      uint64            // GUARDED_BY(mu); invalidations so far
	budget   budget            // GUARDED_BY(mu); the bytes held, against the limit (budget.go)
}

func newTTLCache(ttl, negTTL time.Duration, now func() time.Time, limit int64) *ttlCache {
	return &ttlCache{
		budget:   budget{limit: limit},
		now:      now,
		ttl:      ttl,
		negTTL:   negTTL,
		entries:  make(map[string]cachedEntry),
		listings: make(map[string]*Listing),
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
func (c *ttlCache) belowFloor(path string, seq uint64, listing bool) bool {
	if seq > c.floorMax {
		return false // begun after the last invalidation: the usual case
	}
	for p, f := range c.floors {
		if seq > f {
			continue
		}
		if Under(path, p) {
			return true
		}
		// A listing of path names its invalidated children as they were.
		if parent, _ := SplitPath(p); listing && p != "" && parent == path {
			return true
		}
	}
	return false
}

// generation changes with every invalidation: a request joins only
// in-flight requests of the same generation.
func (c *ttlCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// expiryFor returns when an item cached now with ttl expires, and false if
// ttl disables caching.
func (c *ttlCache) expiryFor(ttl time.Duration) (expiry, bool) {
	switch {
	case ttl < 0:
		return expiry{forever: true}, true
	case ttl == 0:
		return expiry{}, false
	}
	return expiry{at: c.now().Add(ttl)}, true
}

// LOCKS_REQUIRED(c.mu)
func (c *ttlCache) fresh(e expiry) bool {
	return e.forever || c.now().Before(e.at)
}

// begin stamps a request about to be made: its answer's seq.
func (c *ttlCache) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return c.seq
}

// lookup returns the cached entry for path, from a name entry or from the
// parent's fresh listing: of the two, what the later request learned. A
// name entry newer than the listing, even expired, means the listing can
// no longer answer for that name.
func (c *ttlCache) lookup(path string) (Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ce, hasEntry := c.entries[path]
	dir, name := SplitPath(path)
	l, hasListing := c.listings[dir]
	if hasListing && (!hasEntry || l.seq > ce.e.Seq) {
		// The listing is newer: it answers while fresh, and once expired
		// the older name entry cannot answer either.
		e := l.answer(name)
		return e, c.fresh(l.exp) && (e.Kind != None || c.negativeFresh(l))
	}
	return ce.e, hasEntry && c.fresh(ce.exp)
}

// negativeFresh reports whether l may still say that a name does not
// exist: for the negative TTL since it was cached.
//
// LOCKS_REQUIRED(c.mu)
func (c *ttlCache) negativeFresh(l *Listing) bool {
	switch {
	case c.negTTL < 0:
		return true
	case c.negTTL == 0:
		return false
	}
	return c.now().Before(l.at.Add(c.negTTL))
}

// stale makes what is known of path stale, so that the next lookup asks
// the store again: the store proved the version known gone. What was
// known stays as the newest answer (for an outage, and readdirplus), kept
// as an expired entry that a listing cannot outrank.
func (c *ttlCache) stale(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var known Entry
	ce, hasEntry := c.entries[path]
	dir, name := SplitPath(path)
	l, hasListing := c.listings[dir]
	switch {
	case hasListing && (!hasEntry || l.seq > ce.e.Seq):
		known = l.answer(name)
	case hasEntry:
		known = ce.e
	default:
		return // nothing known
	}
	c.seq++
	known.Seq = c.seq
	c.setEntryLocked(path, cachedEntry{e: known, exp: expiry{at: c.now()}})
	c.maybeSweep()
}

// newest returns the newest thing known about path, fresh or not (while
// not swept away), from a name entry or the parent's listing, if a
// request begun after seq learned it: for readdirplus, never to hand out
// what is older than what a lookup has seen; with seq 0, for answering
// when the store cannot.
func (c *ttlCache) newest(path string, seq uint64) (Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	best, found := Entry{}, false
	if ce, ok := c.entries[path]; ok && ce.e.Seq > seq {
		best, found = ce.e, true
	}
	dir, name := SplitPath(path)
	if l, ok := c.listings[dir]; ok && l.seq > seq && (!found || l.seq > best.Seq) {
		best, found = l.answer(name), true
	}
	return best, found
}

// put caches what path resolved to, unless the cache already holds what a
// later request learned (e.Seq 0 counts as now).
func (c *ttlCache) put(path string, e Entry) {
	ttl := c.ttl
	if e.Kind == None {
		ttl = c.negTTL
	}
	exp, ok := c.expiryFor(ttl)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Seq == 0 {
		c.seq++
		e.Seq = c.seq
	}
	if ce, ok := c.entries[path]; ok && ce.e.Seq > e.Seq {
		return // a later request's answer is here already
	}
	dir, _ := SplitPath(path)
	if l, ok := c.listings[dir]; (ok && l.seq > e.Seq) || c.belowFloor(path, e.Seq, false) {
		return // a later listing, or an invalidation, supersedes it
	}
	if !ok {
		// Caching is off, but an older entry must not outlive what we
		// just learned, nor an older listing answer again: keep it,
		// already expired, as a tombstone that outranks the listing.
		if l, listed := c.listings[dir]; listed && c.fresh(l.exp) {
			c.setEntryLocked(path, cachedEntry{e: e, exp: expiry{at: c.now()}})
			c.maybeSweep()
		} else {
			c.delEntryLocked(path)
		}
		return
	}
	c.setEntryLocked(path, cachedEntry{e: e, exp: exp})
	c.maybeSweep()
}

// listing returns a fresh complete listing of dir.
func (c *ttlCache) listing(dir string) (*Listing, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.listings[dir]
	if !ok || !c.fresh(l.exp) {
		return nil, false
	}
	return l, true
}

// putListing caches l, a complete listing whose first page was asked for
// at l.seq, unless it would take more than a quarter of the memory limit
// (its Lister still serves it). It reports whether it did.
func (c *ttlCache) putListing(l *Listing) bool {
	exp, ok := c.expiryFor(c.ttl)
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.budget.fits(l.bytes()) {
		return false
	}
	if old, ok := c.listings[l.dir]; ok && old.seq > l.seq {
		return false // a listing that began later is cached already
	}
	if c.belowFloor(l.dir, l.seq, true) {
		return false // invalidated while it was being read
	}
	l.exp, l.at = exp, c.now()
	c.setListingLocked(l)
	// Name entries of the children that are older than this listing: drop
	// them, the listing answers for them now. Newer ones stay, and answer
	// (see lookup).
	for i := range l.Len() {
		p := ChildPath(l.dir, l.Name(i))
		if ce, ok := c.entries[p]; ok && ce.e.Seq < l.seq {
			c.delEntryLocked(p)
		}
	}
	c.maybeSweep()
	return true
}

// invalidate drops every entry and listing at or under p, and the listing
// of p's parent (which names p); p == "" drops everything. It returns how
// many items it dropped.
func (c *ttlCache) invalidate(p string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Answers of requests begun before now must not come back.
	c.gen++
	if len(c.floors) >= maxFloors {
		clear(c.floors)
		c.floors[""] = c.seq
	}
	c.floors[p] = c.seq
	c.floorMax = c.seq
	n := 0
	for k := range c.entries {
		if Under(k, p) {
			c.delEntryLocked(k)
			n++
		}
	}
	for k := range c.listings {
		if Under(k, p) {
			c.delListingLocked(k)
			n++
		}
	}
	if p != "" {
		parent, _ := SplitPath(p)
		if _, ok := c.listings[parent]; ok {
			c.delListingLocked(parent)
			n++
		}
	}
	return n
}

// maybeSweep drops expired items now and then so a positive TTL does not
// grow the maps without bound, and evicts when the cache holds more than
// its limit.
//
// LOCKS_REQUIRED(c.mu)
func (c *ttlCache) maybeSweep() {
	if c.budget.over(8) {
		c.evictLocked()
	}
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
		dir, _ := SplitPath(k)
		if l, ok := c.listings[dir]; ok && c.fresh(l.exp) && l.seq < v.e.Seq {
			continue
		}
		c.delEntryLocked(k)
	}
	for k, v := range c.listings {
		if !c.fresh(v.exp) {
			c.delListingLocked(k)
		}
	}
}
