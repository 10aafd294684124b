package metadata

import "sync/atomic"

// budget is the memory the metadata of a mount holds, against one limit:
// the cache's entries and listings, and what Charge adds for the names
// the kernel holds (fs's inodes). Past the limit the cache evicts at
// random, name entries first, then listings, until it is back under
// seven eighths. An evicted answer is asked of the store again when next
// needed, whatever the TTL: a TTL of -1 means "never ask again while
// cached", not "never free". An epoch over more names than fit finds few
// of them cached (as it would under LRU): the limit is meant to hold a
// dataset's names (about 80 bytes a name in listings), and to keep a
// mount that outgrows it from growing without bound.
type budget struct {
	limit   int64 // bytes; 0 is no limit
	used    int64 // entries and listings
	evicted uint64
	// external is what Charge added: bytes held elsewhere for names this
	// cache answered. Only part of it counts against the cache (see
	// target), so that names the kernel holds cannot empty the cache.
	external atomic.Int64
}

// Sizes that estimate what an entry costs in memory, besides its
// strings: a map slot with its key and cachedEntry (about 150 bytes).
const entryOverhead = 176

// entryBytes is about what caching path as e costs.
func entryBytes(path string, e cachedEntry) int64 {
	return entryOverhead + int64(len(path)) + int64(len(e.e.Obj.Name)) + int64(len(e.e.Obj.Version))
}

// fits reports whether an item of n bytes may be cached at all: a
// listing larger than a quarter of the limit is not, since it would push
// out most of the rest.
func (b *budget) fits(n int64) bool {
	return b.limit == 0 || n <= b.limit/4
}

// over reports whether the cache must shrink: it holds more than
// target(7/8) of the limit.
func (b *budget) over(eighths int64) bool {
	return b.limit > 0 && b.used > b.target(eighths)
}

// target is what the cache may hold at most after eviction: the given
// eighths of the limit, less what Charge added, but never less than a
// quarter of the limit (the names the kernel holds are bounded by their
// owner, at half of it).
func (b *budget) target(eighths int64) int64 {
	ext := min(b.external.Load(), b.limit/2)
	return max(b.limit*eighths/8-ext, b.limit/4)
}

// setEntryLocked caches path as ce, counting its bytes.
//
// LOCKS_REQUIRED(c.mu)
func (c *ttlCache) setEntryLocked(path string, ce cachedEntry) {
	if old, ok := c.entries[path]; ok {
		c.budget.used -= entryBytes(path, old)
	}
	c.entries[path] = ce
	c.budget.used += entryBytes(path, ce)
}

// delEntryLocked drops path's entry, if any.
//
// LOCKS_REQUIRED(c.mu)
func (c *ttlCache) delEntryLocked(path string) {
	if old, ok := c.entries[path]; ok {
		c.budget.used -= entryBytes(path, old)
		delete(c.entries, path)
	}
}

// setListingLocked caches l in place of any listing of its directory.
//
// LOCKS_REQUIRED(c.mu)
func (c *ttlCache) setListingLocked(l *Listing) {
	c.delListingLocked(l.dir)
	c.listings[l.dir] = l
	c.budget.used += l.bytes()
}

// delListingLocked drops dir's listing, if any.
//
// LOCKS_REQUIRED(c.mu)
func (c *ttlCache) delListingLocked(dir string) {
	if old, ok := c.listings[dir]; ok {
		c.budget.used -= old.bytes()
		delete(c.listings, dir)
	}
}

// evictLocked drops entries and listings at random until the cache is
// back under seven eighths of its share of the limit. An entry that
// answers in place of its directory's listing (newer than it) takes the
// listing with it, which would otherwise answer for the name again.
//
// LOCKS_REQUIRED(c.mu)
func (c *ttlCache) evictLocked() {
	target := c.budget.target(7)
	for k, ce := range c.entries {
		if c.budget.used <= target {
			return
		}
		c.delEntryLocked(k)
		c.budget.evicted++
		dir, _ := SplitPath(k)
		if l, ok := c.listings[dir]; ok && l.seq < ce.e.Seq {
			c.delListingLocked(dir)
			c.budget.evicted++
		}
	}
	for k := range c.listings {
		if c.budget.used <= target {
			return
		}
		c.delListingLocked(k)
		c.budget.evicted++
	}
}
