package filecache

import "strconv"

// Admission: which entry gives way when the cache is full.
//
// Plain LRU admits everything and evicts the least recently used. On a
// cyclic scan of a dataset larger than the cache (every epoch of a
// training job reads every file once) that is the worst policy there is:
// each object is evicted shortly before it is read again, so what an
// epoch finds depends only on how far the evictions ran ahead of the
// readers. We keep LRU order for choosing the victim, but a write that
// needs room may evict it only if its object's references before this
// one outnumber the victim's (TinyLFU's admission test, with exact
// counts instead of a sketch). On a scan, ordered or shuffled, every
// object is read once a pass: the candidate at best ties, loses, and the
// cache keeps a stable subset of the dataset. Counts age (halve) as the
// cache misses, so a subset no longer read gives way to data read now.
// Ageing once per limit of misses costs a walk over entries and history
// under the lock: at most a few per KiB missed, amortised.
//
// Time here is the bytes offered to the cache by writes (misses), not
// the wall clock: the decisions depend on the order of reads, never on
// how fast they ran. Hits do not move it: while the working set fits,
// nothing ages and nothing is evicted.
const (
	// maxRefs caps the reference count. A low cap lets an old working
	// set age out within a few passes over a new one.
	maxRefs = 3
	// An entry's references closer than limit/episodeDiv bytes of
	// misses apart are one reference: the reads (and writes) of one
	// file in one epoch, even interleaved with other readers'.
	episodeDiv = 4
	// Every limit/ageDiv bytes of misses every count halves.
	ageDiv = 1
	// ghostSpan: the history of an object not cached goes when it was
	// not referenced within ghostSpan limits of misses.
	ghostSpan = 8
	// ghostsPerEntry bounds the history kept of objects not cached, as
	// a multiple of the entries cached (plus minGhosts): it covers
	// datasets of up to about that many times the cache's object count.
	ghostsPerEntry = 4
	minGhosts      = 4096
	maxGhosts      = 1 << 20 // about 55 MiB of history at most (measured)
)

// ghost is the reference history of an object version not cached (never
// written, rejected or evicted).
type ghost struct {
	at   int64 // Store.clock at its last reference
	refs uint8
}

// tickLocked advances the clock by n bytes offered to the cache, ageing
// every count each time it crosses limit/ageDiv.
// LOCKS_REQUIRED(s.mu)
func (s *Store) tickLocked(n int64) {
	s.clock += n
	every := max(s.limit/ageDiv, 1)
	if s.nextAge == 0 {
		s.nextAge = every
	}
	for i := 0; s.clock >= s.nextAge; i++ {
		if i < 2 { // two halvings take maxRefs to 1
			s.ageLocked()
		}
		s.nextAge += every
	}
}

// ageLocked halves every reference count, rounding up: a count of 1
// stays, so that an object referenced once, before the ageing, does not
// look older than one referenced once after it (on a shuffled epoch that
// would let the second evict the first and churn). It forgets objects not
// cached that were not referenced within the last ghostSpan limits of
// misses.
// LOCKS_REQUIRED(s.mu)
func (s *Store) ageLocked() {
	for _, e := range s.entries {
		e.refs = (e.refs + 1) >> 1
	}
	for id, g := range s.ghosts {
		if s.clock-g.at > ghostSpan*s.limit {
			delete(s.ghosts, id)
			continue
		}
		g.refs = (g.refs + 1) >> 1
		s.ghosts[id] = g
	}
}

// referLocked counts a reference to e: a new one if e was not referenced
// within the last limit/episodeDiv bytes of misses.
// LOCKS_REQUIRED(s.mu)
func (s *Store) referLocked(e *entry) {
	if !e.referred || s.clock-e.refAt > s.limit/episodeDiv {
		e.refs = min(e.refs+1, maxRefs)
	}
	e.referred, e.refAt = true, s.clock
}

// admitsLocked reports whether candidate c may evict v: v was not
// referenced since the store opened (it is left from an earlier run), or
// c's references before the current one outnumber v's.
// LOCKS_REQUIRED(s.mu)
func (s *Store) admitsLocked(c, v *entry) bool {
	return s.hooks.admitAll || !v.referred || c.refs > v.refs+1
}

// ghostID is a key's history slot: 64 bits of its SHA-256.
func ghostID(key string) uint64 {
	if len(key) < 16 {
		return 0
	}
	id, _ := strconv.ParseUint(key[:16], 16, 64)
	return id
}

// reviveLocked gives a new entry the history of its object, if any.
// LOCKS_REQUIRED(s.mu)
func (s *Store) reviveLocked(e *entry) {
	id := ghostID(e.key)
	if g, ok := s.ghosts[id]; ok {
		e.refs, e.refAt, e.referred = g.refs, g.at, true
		delete(s.ghosts, id)
	}
}

// buryLocked keeps the history of an entry leaving the cache, while
// there is room for it.
// LOCKS_REQUIRED(s.mu)
func (s *Store) buryLocked(e *entry) {
	if !e.referred || e.refs == 0 {
		return
	}
	if s.ghosts == nil {
		s.ghosts = map[uint64]ghost{}
	}
	id := ghostID(e.key)
	if _, ok := s.ghosts[id]; !ok && len(s.ghosts) >= min(ghostsPerEntry*len(s.entries)+minGhosts, maxGhosts) {
		return
	}
	s.ghosts[id] = ghost{at: e.refAt, refs: e.refs}
}
