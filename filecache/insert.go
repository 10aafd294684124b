package filecache

import (
	"strconv"
)

// Where a new entry enters the LRU list, and when a use moves an entry to
// its front.
//
// Plain LRU puts every new entry at the most recent end. On a dataset
// larger than the cache, read epoch after epoch, that evicts every file
// just before the next epoch reads it again: nothing hits. So the store
// has two insertion modes (Qureshi et al. 2007, "Adaptive insertion
// policies for high performance caching"):
//
//   - LRU: a new entry enters at the most recent end, and every use
//     moves an entry there (as before this policy).
//   - Scan-resistant (BIP, bimodal insertion): once the cache is full, a
//     new entry enters at the least recent end, except one in bipOneIn
//     at the most recent end; and the uses of an entry during its own
//     fill do not move it. So newcomers replace one another at the back
//     while what was kept, and is used again, stays: an epoch over a
//     dataset of 1.5× the cache hits about two thirds of it. The one in
//     bipOneIn lets a new working set in, slowly.
//
// An entry's fill runs from its creation, and from each write to it,
// until fillShare-th of the cache's size in other traffic (bytes hit and
// bytes written) has passed: reads of blocks that readahead wrote a moment
// before are the same pass over the object, not a reuse.
//
// The store picks the mode that would have hit more: it simulates both
// on a sample of the objects (shadow lists of key hashes and sizes, no
// data) with the cache's size scaled by the sample's rate (SHARDS,
// Waldspurger et al. 2015), fed the same uses the store sees, and counts
// the bytes each hit and the other did not, halved every half scaled
// cache size of sampled traffic. Scan-resistant is the start: it loses
// nothing until the cache is full, and a reuse pattern LRU serves better
// (a new set that fits, after the cache was filled by data read once)
// shows in the shadows within a sixteenth of the cache's size of the
// set's second pass, after which the rest of that pass enters as LRU
// would. The shadows see the objects whole: a sampled object is present
// or not, at its full size.
//
// Every operation here is O(1): a map lookup and list splices per sampled
// use, at most shadowEvictions evictions per shadow insertion, no walk.

const (
	// bipOneIn: in scan-resistant mode one new entry in bipOneIn enters
	// at the most recent end (the paper's 1/32).
	bipOneIn = 32
	// fillShare: an entry's fill lasts limit/fillShare bytes of traffic
	// after its last write.
	fillShare = 8
	// shadowMax bounds the entries of each shadow list: the sampling
	// rate halves when a list would hold more (SHARDS' fixed size; 8K
	// samples give miss ratio curves within about 1%).
	shadowMax = 1 << 13
	// shadowEvictions bounds the evictions one shadow insertion makes;
	// after the rate halves, the lists shrink to the new size over the
	// next insertions instead of at once.
	shadowEvictions = 3
	// maxShift bounds the sampling: 1 object in 2^40.
	maxShift = 40
	// decayShare: the shadows' hit counts halve every scaled cache
	// size / decayShare of sampled traffic, so that they tell what the
	// last pass did, not the last hour.
	decayShare = 2
	// switchGap, switchObjects: a mode is left only when the other
	// shadow hit more by at least the scaled cache size / switchGap and
	// switchObjects times the object in use (four objects in the tests'
	// 64-object cache: fewer let a shuffled epoch's chance runs of LRU
	// hits flip it), and scan-resistant mode only when LRU hit more than
	// leaveBIP times as much.
	switchGap     = 16
	switchObjects = 4
	leaveBIP      = 3
)

// inserter is the store's insertion policy. Store.mu guards it.
type inserter struct {
	lru   bool  // LRU mode; false: scan-resistant
	clock int64 // bytes of traffic: read from present blocks and written
	seq   uint32
	// Counters for the metrics.
	bipInserts, switches int64
	shadow               shadows
}

// insertLocked links the new entry e into the LRU list where the mode
// says, and starts its fill. The cache is full when e's object would not
// fit without an eviction.
// LOCKS_REQUIRED(s.mu)
func (s *Store) insertLocked(e *entry) {
	size := s.roundUp(int64(e.obj.Size))
	full := s.used+s.reserved-s.reservedEvicted+size > s.limit
	e.fillEnd = s.ins.clock + s.limit/fillShare
	if s.ins.lru || !full {
		e.elem = s.lru.PushFront(e)
		return
	}
	s.ins.seq++
	if s.ins.seq%bipOneIn == 1 {
		e.elem = s.lru.PushFront(e)
		return
	}
	e.elem = s.lru.PushBack(e)
	s.ins.bipInserts++
}

// useLocked tells the policy that n bytes of e were read from the cache
// (write false) or are being written to it, and marks e used: moved to
// the front unless in scan-resistant mode it is still in its fill. A
// write starts e's fill again.
// LOCKS_REQUIRED(s.mu)
func (s *Store) useLocked(e *entry, n int64, write bool) {
	s.ins.clock += n
	if h, ok := entryHash(e); ok {
		size := s.roundUp(int64(e.obj.Size))
		if s.ins.shadow.use(h, size, n, write, s.limit) {
			s.ins.decide(s.limit>>s.ins.shadow.shift, size)
		}
	}
	s.touchLocked(e)
	e.unread = write
	if write {
		e.fillEnd = s.ins.clock + s.limit/fillShare
	}
}

// Consumed tells the cache that a reader has had bytes of obj that the
// cache stored, from a copy outside it: the buffer of the fetch that
// wrote them, or readahead's memory. Its entry counts as read since its
// last write (ferry_cache_evicted_unread_bytes_total). Reads from
// outside the cache are not uses: the policy sees the reads of the cache.
func (s *Store) Consumed(obj Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.byObj[obj]; e != nil {
		e.unread = false
	}
}

// promotesLocked reports whether a use of e now moves it to the front.
// LOCKS_REQUIRED(s.mu)
func (s *Store) promotesLocked(e *entry) bool {
	return s.ins.lru || s.ins.clock >= e.fillEnd
}

// decide switches the mode when the other shadow hit clearly more of
// late; scaled is the shadows' cache size. Leaving scan-resistant mode
// takes leaveBIP times its hits: on a shuffled scan LRU hits too, in
// runs, and at the start of an epoch about as much as the other; a new
// set that fits, after data read once, is hit by LRU alone.
func (in *inserter) decide(scaled, size int64) {
	l, b := in.shadow.only[0], in.shadow.only[1]
	gap := max(scaled/switchGap, switchObjects*size, 1)
	switch {
	case !in.lru && l > leaveBIP*b+gap, in.lru && b > l+l/4+gap:
		in.lru = !in.lru
		in.switches++
	}
}

// roundUp rounds n up to the volume's allocation unit, as the cache
// counts space.
func (s *Store) roundUp(n int64) int64 {
	return (n + s.fsBlock - 1) / s.fsBlock * s.fsBlock
}

// entryHash is 64 bits of e's key (the hex SHA-256 of the object's name,
// version and size): uniform, so a range of it is a fair sample.
func entryHash(e *entry) (uint64, bool) {
	if len(e.key) < 16 {
		return 0, false
	}
	h, err := strconv.ParseUint(e.key[:16], 16, 64)
	return h, err == nil
}

// shadows simulates the two insertion modes on the objects whose hash is
// below 2^(64-shift), with a cache of limit >> shift bytes.
type shadows struct {
	shift uint8
	clock int64 // sampled traffic, bytes
	// decayAt: the clock at which both lists' hits (and seen) halve.
	decayAt int64
	seen    int64 // sampled traffic since decays, halved with hits
	// only[i]: bytes list i hit and the other did not, decayed. What
	// both hit says nothing of which is better, and a long run of it
	// (a set read for an hour) would delay a switch.
	only    [2]int64
	inserts int           // into the LRU list since the sampling last halved
	lists   [2]shadowList // LRU, then scan-resistant
}

// use feeds one use of n bytes of an object of size bytes (hash h); it
// reports whether the object is sampled.
func (sh *shadows) use(h uint64, size, n int64, write bool, limit int64) bool {
	if sh.shift > 0 && h>>(64-sh.shift) != 0 {
		return false
	}
	scaled := limit >> sh.shift
	crowded := false
	var hit [2]bool
	for i := range sh.lists {
		l := &sh.lists[i]
		l.bip = i == 1
		var inserted, full bool
		hit[i], inserted, full = l.use(h, size, n, write, sh.clock, scaled)
		crowded = crowded || full
		if inserted && i == 0 {
			sh.inserts++
		}
	}
	for i := range hit {
		if hit[i] && !hit[1-i] {
			sh.only[i] += n
		}
	}
	sh.clock += n
	sh.seen += n
	if sh.clock >= sh.decayAt {
		for i := range sh.lists {
			sh.lists[i].hits /= 2
			sh.only[i] /= 2
		}
		sh.seen /= 2
		sh.decayAt = sh.clock + max(scaled/decayShare, 1)
	}
	if crowded && sh.shift < maxShift && sh.inserts >= shadowMax/2 {
		// A list holds shadowMax entries while its bytes fit the
		// scaled size: sample half as many objects. Those no longer
		// sampled stay until they reach the back (the next lowering
		// waits until most have: they are never used, so they sink).
		sh.shift++
		sh.inserts = 0
	}
	return true
}

// shadowNode is one sampled object in a shadow list; prev and next are
// indexes in shadowList.nodes (-1: none).
type shadowNode struct {
	h          uint64
	size       int64
	fillEnd    int64
	prev, next int32
}

// shadowList is one simulated cache: a list of nodes, front = most
// recent, in a slice with a free list, and an index by hash.
type shadowList struct {
	bip         bool
	nodes       []shadowNode
	pos         map[uint64]int32
	front, back int32
	free        int32 // head of the free nodes (linked by next), -1: none
	used        int64
	seq         uint32
	hits        int64 // bytes, decayed
}

// use applies one use to the list, counting a hit if the object is
// present past its fill (a write within the fill continues it). It
// reports whether the use hit, whether it inserted the object, and
// whether the list was full by entries while its bytes fit (the sampling
// should be halved).
func (l *shadowList) use(h uint64, size, n int64, write bool, clock, scaled int64) (hit, inserted, crowded bool) {
	if l.pos == nil {
		l.pos = make(map[uint64]int32)
		l.front, l.back, l.free = -1, -1, -1
	}
	fill := scaled / fillShare
	if i, ok := l.pos[h]; ok {
		inFill := clock < l.nodes[i].fillEnd
		if !inFill {
			l.hits += n
		}
		if !l.bip || !inFill {
			l.unlink(i)
			l.pushFront(i)
		}
		if write && inFill {
			l.nodes[i].fillEnd = clock + n + fill
		}
		return !inFill, false, false
	}
	if size > scaled {
		return false, false, false // never fits
	}
	full := l.used+size > scaled
	crowded = len(l.pos) >= shadowMax && !full
	for k := 0; k < shadowEvictions && l.back >= 0 && (l.used+size > scaled || len(l.pos) >= shadowMax); k++ {
		l.evict(l.back)
	}
	if l.used+size > scaled || len(l.pos) >= shadowMax {
		return false, false, crowded
	}
	i := l.alloc(shadowNode{h: h, size: size, fillEnd: clock + n + fill})
	l.pos[h] = i
	l.used += size
	if l.bip && full {
		l.seq++
		if l.seq%bipOneIn != 1 {
			l.pushBack(i)
			return false, true, crowded
		}
	}
	l.pushFront(i)
	return false, true, crowded
}

func (l *shadowList) alloc(nd shadowNode) int32 {
	if l.free >= 0 {
		i := l.free
		l.free = l.nodes[i].next
		l.nodes[i] = nd
		return i
	}
	l.nodes = append(l.nodes, nd)
	return int32(len(l.nodes) - 1)
}

func (l *shadowList) evict(i int32) {
	l.unlink(i)
	delete(l.pos, l.nodes[i].h)
	l.used -= l.nodes[i].size
	l.nodes[i] = shadowNode{next: l.free}
	l.free = i
}

func (l *shadowList) unlink(i int32) {
	nd := &l.nodes[i]
	if nd.prev >= 0 {
		l.nodes[nd.prev].next = nd.next
	} else {
		l.front = nd.next
	}
	if nd.next >= 0 {
		l.nodes[nd.next].prev = nd.prev
	} else {
		l.back = nd.prev
	}
	nd.prev, nd.next = -1, -1
}

func (l *shadowList) pushFront(i int32) {
	nd := &l.nodes[i]
	nd.prev, nd.next = -1, l.front
	if l.front >= 0 {
		l.nodes[l.front].prev = i
	} else {
		l.back = i
	}
	l.front = i
}

func (l *shadowList) pushBack(i int32) {
	nd := &l.nodes[i]
	nd.prev, nd.next = l.back, -1
	if l.back >= 0 {
		l.nodes[l.back].next = i
	} else {
		l.front = i
	}
	l.back = i
}

// hitRatio is the list's decayed hit bytes over the decayed sampled
// traffic.
func (sh *shadows) hitRatio(i int) float64 {
	if sh.seen <= 0 {
		return 0
	}
	return float64(sh.lists[i].hits) / float64(sh.seen)
}
