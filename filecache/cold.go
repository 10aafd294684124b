package filecache

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Cold entries. Memory holds an entry whole (name, bitmap, CRCs, about
// 700 bytes with its maps) only while it is in use: from its first use
// in this process until it has been idle long enough to be put back
// (cooled). Every other entry the index holds is cold: its key, row and
// size, 48 bytes in a queue (up to a third more with the slots of
// entries gone from it) and about 24 in a map, so that a cache of 1.28M
// objects costs about 92-112 MB here rather than 900, and Open reads
// only the entries' snapshot a clean Close left (snapshot.go) or the
// index's atime rows, not every record. A cold
// entry is read from the index when it is next looked up (warmed), and
// checked then as Open once checked every entry: a record that does not
// decode, another block size, a data file that is missing.
//
// The queue is in LRU order, least recent first, and every cold entry is
// less recent than every warm one: Open queues the index's entries by
// access time, cooling takes warm entries from the back of the LRU list,
// and warming takes the entry out of the queue. So eviction takes cold
// entries first, from the queue's head, then warm ones.

// maxWarm bounds the entries held whole; the least recently used idle
// ones beyond it are cooled after each index commit. A small object's
// entry takes about 830 bytes of heap (14 MB for maxWarm); 65,536 of them
// took 54 MB of the 620 MB live in bench scale's read of 1.28M files,
// where every entry is used once an epoch and warmed again in the next
// whatever the bound.
const maxWarm = 1 << 14

// coldKey is an entry's key (the hex SHA-256 of keyFor) in binary.
type coldKey [32]byte

// coldKeyOf returns key's binary form, and false if key is not 64 hex
// digits (no entry's key: a damaged row).
func coldKeyOf(key string) (ck coldKey, ok bool) {
	if len(key) != 2*len(ck) {
		return ck, false
	}
	_, err := hex.Decode(ck[:], []byte(key))
	return ck, err == nil
}

func (ck coldKey) String() string { return hex.EncodeToString(ck[:]) }

// coldSlot is one cold entry: its key, its row in the index and its
// allocated bytes; bytes < 0 marks a slot whose entry left the queue
// (warmed, evicted or dropped).
type coldSlot struct {
	key   coldKey
	row   uint64
	bytes int64
}

// coldSet is the queue of cold entries with an index by key. The index
// is by the key's first 8 bytes: 16 bytes a key in a map instead of 36
// (about 50 MB less at 1.28M objects), each hit checked against the
// slot's whole key; the rare key whose first 8 bytes another queued key
// has (for 1.28M keys, a chance of about one in 20 million that any
// two share them) goes in a map of its own. It is not safe for
// concurrent use: Store.mu guards it.
//
// The slots are allocated a chunk at a time and never copied to a larger
// array: a queue of 1.28M slots (61 MB) that grew by append had a second
// copy of itself in the heap at each growth and at each compaction, 140
// MB of slots at the remount read's peak. A full queue whose gone slots
// are a quarter of it or more is compacted in place instead of growing,
// so that while entries leave and come back (an epoch's warms and
// cools) the slots take at most a third more than the entries queued;
// a queue mostly emptied (evictions, warms not cooled) gives its empty
// chunks back.
type coldSet struct {
	chunks [][]coldSlot      // slot i is chunks[i/coldChunk][i%coldChunk]
	end    int               // slots in use: the queue's tail
	head   int               // slots before head are gone
	pos    map[uint64]int32  // key's first 8 bytes -> slot
	more   map[coldKey]int32 // keys whose first 8 bytes another has in pos
}

// coldChunk is the slots the queue allocates at a time (192 KiB).
const coldChunk = 1 << 12

func (c *coldSet) slot(i int32) *coldSlot {
	return &c.chunks[uint32(i)/coldChunk][uint32(i)%coldChunk]
}

// short is the index's key for k.
func (k coldKey) short() uint64 { return binary.LittleEndian.Uint64(k[:8]) }

func (c *coldSet) len() int { return len(c.pos) + len(c.more) }

// find returns k's index in slots.
func (c *coldSet) find(k coldKey) (int32, bool) {
	if i, ok := c.pos[k.short()]; ok && c.slot(i).key == k {
		return i, true
	}
	i, ok := c.more[k]
	return i, ok
}

func (c *coldSet) has(k coldKey) bool {
	_, ok := c.find(k)
	return ok
}

// add queues k, at row of the index and of bytes allocated, as the most
// recent cold entry; k must not be queued already.
func (c *coldSet) add(k coldKey, row uint64, bytes int64) {
	if c.pos == nil {
		c.pos = map[uint64]int32{}
	}
	if c.end == len(c.chunks)*coldChunk {
		if gone := c.end - c.len(); gone >= coldChunk && gone >= c.end/4 {
			c.compact(false)
		} else {
			c.chunks = append(c.chunks, make([]coldSlot, coldChunk))
		}
	}
	i := int32(c.end)
	c.setPos(k, i)
	*c.slot(i) = coldSlot{key: k, row: row, bytes: bytes}
	c.end++
}

// rowOf returns the row of the cold entry k, if k is queued.
func (c *coldSet) rowOf(k coldKey) (uint64, bool) {
	i, ok := c.find(k)
	if !ok {
		return 0, false
	}
	return c.slot(i).row, true
}

// setPos records that k is at index i of slots: in pos unless another
// key holds its short key there.
func (c *coldSet) setPos(k coldKey, i int32) {
	sk := k.short()
	if j, ok := c.pos[sk]; ok && c.slot(j).key != k {
		if c.more == nil {
			c.more = map[coldKey]int32{}
		}
		c.more[k] = i
		return
	}
	c.pos[sk] = i
}

// take removes k from the queue and returns its slot, or false if k is
// not queued.
func (c *coldSet) take(k coldKey) (coldSlot, bool) {
	i, ok := c.find(k)
	if !ok {
		return coldSlot{}, false
	}
	if _, inMore := c.more[k]; inMore {
		delete(c.more, k)
	} else {
		sk := k.short()
		delete(c.pos, sk)
		for k2, j := range c.more { // a key it kept out of pos takes its place
			if k2.short() == sk {
				c.pos[sk] = j
				delete(c.more, k2)
				break
			}
		}
	}
	p := c.slot(i)
	sl := *p
	p.bytes = -1
	if gone := c.end - c.len(); gone >= coldChunk && gone >= 3*c.len() {
		// Mostly gone (evicted, or warmed and not cooled): give the
		// memory back.
		c.compact(true)
	}
	return sl, true
}

// oldest returns the least recent cold entry's key, if any.
func (c *coldSet) oldest() (coldKey, bool) {
	for c.head < c.end && c.slot(int32(c.head)).bytes < 0 {
		c.head++
	}
	if c.head == c.end {
		return coldKey{}, false
	}
	return c.slot(int32(c.head)).key, true
}

// compact moves the queued slots down over the gone ones, in order; with
// free, it also lets go of the chunks left empty.
func (c *coldSet) compact(free bool) {
	j := int32(0)
	for i := int32(c.head); i < int32(c.end); i++ {
		sl := *c.slot(i)
		if sl.bytes < 0 {
			continue
		}
		if i != j {
			*c.slot(j) = sl
			if _, inMore := c.more[sl.key]; inMore {
				c.more[sl.key] = j
			} else {
				c.pos[sl.key.short()] = j
			}
		}
		j++
	}
	c.head, c.end = 0, int(j)
	if free {
		keep := (c.end + coldChunk - 1) / coldChunk
		clear(c.chunks[keep:])
		c.chunks = c.chunks[:keep]
	}
}

// each calls fn for every cold entry, least recent first.
func (c *coldSet) each(fn func(sl coldSlot)) {
	for i := int32(c.head); i < int32(c.end); i++ {
		if sl := c.slot(i); sl.bytes >= 0 {
			fn(*sl)
		}
	}
}

// lockLookup returns obj's warm entry, warming it first if it is cold;
// nil if the cache has no entry for obj. It takes s.mu and returns with
// it held; warming reads the index without it.
// LOCKS_ACQUIRED(s.mu)
func (s *Store) lockLookup(obj Key) *entry {
	return s.lockLookupSum(obj, nil)
}

// lockLookupSum is lockLookup with obj's key, if the caller has it
// (nil: computed, outside the lock, if need be).
// LOCKS_ACQUIRED(s.mu)
func (s *Store) lockLookupSum(obj Key, ck *coldKey) *entry {
	s.mu.Lock()
	if e := s.byObj[obj]; e != nil || s.cold.len() == 0 || s.closed {
		return e
	}
	if ck == nil {
		s.mu.Unlock()
		sum := s.keySum(obj)
		ck = &sum
		s.mu.Lock()
		if e := s.byObj[obj]; e != nil {
			return e
		}
	}
	row, ok := s.cold.rowOf(*ck)
	if !ok {
		return nil
	}
	s.mu.Unlock()
	s.warm(obj, ck.String(), *ck, row)
	s.mu.Lock()
	return s.byObj[obj]
}

// warm reads the cold entry key (of obj), at row, from the index and
// makes it a warm entry, or drops it if its record or its file is not
// usable. Another warm of the same key, or an eviction, may come first:
// the queue decides who had it.
func (s *Store) warm(obj Key, key string, ck coldKey, row uint64) {
	rows, err := s.readEntry(row)
	rec := rows.rec
	f, st, serr := s.warmFile(key) // f is installed below
	s.mu.Lock()
	if s.closed || (err != nil && !errors.Is(err, errBadRecord) && !errors.Is(err, errIndexDamaged)) {
		// The index is closed, not wrong: leave the entry as it is.
		s.mu.Unlock()
		closeIfOpen(f)
		return
	}
	if r, ok := s.cold.rowOf(ck); !ok || r != row {
		// Warmed, evicted or dropped meanwhile (and perhaps made and
		// cooled again, at another row).
		s.mu.Unlock()
		closeIfOpen(f)
		return
	}
	sl, _ := s.cold.take(ck)
	bytes := sl.bytes
	if err != nil || rec == nil || rec.blockSize != s.blockSize || serr != nil ||
		rec.name != obj.Name || rec.version != obj.Version || rec.size != obj.Size {
		v := s.dropColdLocked(key, row, bytes)
		s.mu.Unlock()
		closeIfOpen(f)
		s.finishEvictions([]*entry{v})
		why := "no record"
		switch {
		case err != nil:
			why = err.Error()
		case rec == nil:
		case rec.blockSize != s.blockSize:
			why = "another block size"
		case serr != nil:
			why = "data file: " + serr.Error()
		}
		s.logOnce("stale entry", "cache: entries found unusable as they were first used are dropped (logged once)", "why", why)
		return
	}
	e := &entry{
		key: key, row: row, own: true, obj: obj, live: true,
		nblocks: numBlocks(rec.size, rec.blockSize),
		present: rec.present, crcs: rec.crcs, bytes: bytes,
		savedAtime: rows.atime, savedBytes: rows.bytes,
	}
	// Checked in this boot, by this process or an earlier one: good while
	// the file shows this stamp (checked.go).
	if stamp := stampFrom(st); rows.checked.matches(s.bootID, stamp, rec.size) {
		e.verified = stamp
	}
	s.allocatedLocked(e, st.Blocks*512) // the file's, not the queue's count
	e.elem = s.lru.PushFront(e)
	s.entries[key] = e
	s.byObj[obj] = e
	var toClose []openFiles
	if f != nil {
		e.file, e.openElem = f, s.open.PushFront(e)
		toClose = s.trimOpenLocked()
	}
	if rec.format == recordV1 || rows.lost > 0 {
		// Written again, chunked, by the next commit; damaged chunks
		// (their blocks absent now) deleted first.
		e.resetChunks = numChunks(e.nblocks) > 1 || rows.lost > 0
		s.markAllDirtyLocked(e)
	}
	s.touchLocked(e)
	var victims []*entry
	if s.used > s.limit {
		// The file holds more than the index said (writes after its
		// last commit): make room as a write would. The free-space
		// floor is the writes' to keep.
		victims, _ = s.makeRoomLocked(0, e, 1<<62)
	}
	s.mu.Unlock()
	for _, c := range toClose {
		c.close()
	}
	s.finishEvictions(victims)
	if s.warmed.Add(1)%releaseEvery == 0 {
		// The records just read stay mapped until released: a
		// restarted epoch warms thousands a second, and the commit
		// each second (which releases too) was not often enough to
		// keep them from adding 160 MiB to ferry's RSS at 1.28M.
		releaseIndexPages(s.liveDB.Load())
	}
}

// warmFile opens the data file of key, for the warm to install, and
// returns its attributes. If it cannot be opened (no descriptor free,
// its mode), the path is looked at instead, and the warm goes on without
// it: only a file that is missing or not a regular file is an error,
// which drops the entry.
func (s *Store) warmFile(key string) (*os.File, *unix.Stat_t, error) {
	path := s.pathFor(key)
	f, st, err := openDataFile(path)
	if err == nil {
		return f, st, nil
	}
	var lst unix.Stat_t
	if err := unix.Lstat(path, &lst); err != nil {
		return nil, nil, err
	}
	if lst.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, nil, errNotRegular
	}
	return nil, &lst, nil
}

// releaseEvery warms, the index's pages are released (releaseIndexPages):
// a warm reads its rows at a random place in the index, and each page it
// faults in maps the 64 KiB of the page cache around it, so 32 warms leave
// up to 2 MiB mapped (128 left 24 MiB in a restarted epoch of 5,000 warms
// a second, when an entry's three rows were in three places). Each release costs the next warms the faults of the tree's
// upper pages again, a few dozen.
const releaseEvery = 32

// dropColdLocked removes the cold entry key, at row and of bytes, as an
// eviction does: its rows go at the next commit, and the returned entry
// (not live, not pinned) is for finishEvictions to unlink its file
// outside the lock. LOCKS_REQUIRED(s.mu)
func (s *Store) dropColdLocked(key string, row uint64, bytes int64) *entry {
	s.deleted[row] = key
	s.deleting[key] = &deletion{}
	s.used -= bytes
	s.pendingFree += bytes
	return &entry{key: key, row: row, bytes: bytes}
}

// evictColdLocked evicts the least recent cold entry, and returns it for
// finishEvictions, or nil if there is none.
// LOCKS_REQUIRED(s.mu)
func (s *Store) evictColdLocked() *entry {
	ck, ok := s.cold.oldest()
	if !ok {
		return nil
	}
	sl, _ := s.cold.take(ck)
	s.evictions.Add(1)
	return s.dropColdLocked(ck.String(), sl.row, sl.bytes)
}

// coolLocked puts the least recently used idle warm entries beyond
// maxWarm back in the cold queue, and returns their open files to close.
// An entry is idle when nothing pins or holds it, no read check counts on
// it and the index has everything it holds: so it runs right after a
// commit, under flushMu, with none in flight. What only memory knew of it
// goes: the blocks checked for splicing (splice.go) are checked again; a
// check of the whole file is kept in the index (checked.go).
// LOCKS_REQUIRED(s.flushMu, s.mu)
func (s *Store) coolLocked() []openFiles {
	var files []openFiles
	for el := s.lru.Back(); el != nil && s.lru.Len() > s.hooks.maxWarm; {
		e := el.Value.(*entry)
		el = el.Prev()
		if !e.own || e.pins > 0 || e.holds > 0 || e.writing > 0 || e.wantReadCheck || e.readCheck != nil ||
			e.metaDirty || e.atimeDirty || e.checkedDirty || e.resetChunks || len(e.dirtyChunks) > 0 {
			continue
		}
		if _, dirty := s.dirty[e.key]; dirty {
			continue
		}
		ck, ok := coldKeyOf(e.key)
		if !ok {
			continue
		}
		files = append(files, s.detachFileLocked(e))
		s.lru.Remove(e.elem)
		delete(s.entries, e.key)
		delete(s.byObj, e.obj)
		e.live, e.elem = false, nil
		s.cold.add(ck, e.row, e.bytes)
		s.cooled.Add(1)
	}
	return files
}

// cool runs coolLocked. LOCKS_REQUIRED(s.flushMu)
func (s *Store) cool() {
	s.mu.Lock()
	if s.lru.Len() <= s.hooks.maxWarm {
		s.mu.Unlock()
		return
	}
	files := s.coolLocked()
	s.mu.Unlock()
	for _, f := range files {
		f.close()
	}
}
