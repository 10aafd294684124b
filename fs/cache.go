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
type entry struct {
	kind kind
	obj  bucket.Object
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
	e   entry
	exp expiry
	seq uint64 // when it was stored, to pick the newer of entry and listing
}

type cachedListing struct {
	entries []dirEntry
	byName  map[string]int // index into entries
	exp     expiry
	seq     uint64
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
	seq      uint64                   // GUARDED_BY(mu); stamps items in store order
}

func newMetaCache(ttl, negTTL time.Duration, now func() time.Time) *metaCache {
	return &metaCache{
		now:      now,
		ttl:      ttl,
		negTTL:   negTTL,
		entries:  make(map[string]cachedEntry),
		listings: make(map[string]cachedListing),
	}
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

// lookup returns the cached entry for path, from a name entry or from the
// parent's fresh listing.
func (c *metaCache) lookup(path string) (entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var (
		best    entry
		bestSeq uint64
		found   bool
	)
	if ce, ok := c.entries[path]; ok && c.fresh(ce.exp) {
		best, bestSeq, found = ce.e, ce.seq, true
	}
	// The newer of the name entry and the parent's listing wins: a lookup
	// after a listing saw a change the listing did not, and vice versa.
	dir, name := splitPath(path)
	if l, ok := c.listings[dir]; ok && c.fresh(l.exp) {
		le := entry{kind: kindNone}
		if i, ok := l.byName[name]; ok {
			le = l.entries[i].entry
		}
		if !found || newerEntry(le, l.seq, best, bestSeq) {
			return le, true
		}
	}
	return best, found
}

// newerEntry reports whether a (stored as seq) says more recent things
// than b (stored as bseq). Mostly the later stored, but of two versions of
// a file the later updated: a listing whose request began before an
// overwrite can be stored after a Stat that saw it.
func newerEntry(a entry, seq uint64, b entry, bseq uint64) bool {
	if a.kind == kindFile && b.kind == kindFile && a.obj.Version != b.obj.Version && !a.obj.Updated.Equal(b.obj.Updated) {
		return a.obj.Updated.After(b.obj.Updated)
	}
	return seq > bseq
}

// expired returns path's entry even if it has expired (while it has not
// been swept away), from a name entry or the parent's listing, the newer
// of the two; for answering when the store cannot.
func (c *metaCache) expired(path string) (entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ce, found := c.entries[path]
	dir, name := splitPath(path)
	if l, ok := c.listings[dir]; ok {
		le := entry{kind: kindNone}
		if i, ok := l.byName[name]; ok {
			le = l.entries[i].entry
		}
		if !found || newerEntry(le, l.seq, ce.e, ce.seq) {
			return le, true
		}
	}
	return ce.e, found
}

// put caches what path resolved to.
func (c *metaCache) put(path string, e entry) {
	ttl := c.ttl
	if e.kind == kindNone {
		ttl = c.negTTL
	}
	exp, ok := c.expiryFor(ttl)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !ok {
		// Caching is off, but an older positive entry must not outlive
		// what we just learned.
		delete(c.entries, path)
		return
	}
	c.seq++
	c.entries[path] = cachedEntry{e: e, exp: exp, seq: c.seq}
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

// putListing caches a complete listing of dir. It takes ownership of
// entries.
func (c *metaCache) putListing(dir string, entries []dirEntry) {
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
	c.seq++
	c.listings[dir] = cachedListing{entries: entries, byName: byName, exp: exp, seq: c.seq}
	// Name entries of the children are older than this listing: drop them,
	// the listing answers for them now; but not one that saw a newer
	// version of a file than the listing did.
	for _, e := range entries {
		p := childPath(dir, e.name)
		if ce, ok := c.entries[p]; ok && !newerEntry(e.entry, c.seq, ce.e, ce.seq) {
			continue
		}
		delete(c.entries, p)
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
		if !c.fresh(v.exp) {
			delete(c.entries, k)
		}
	}
	for k, v := range c.listings {
		if !c.fresh(v.exp) {
			delete(c.listings, k)
		}
	}
}
