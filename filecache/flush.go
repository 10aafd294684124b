package filecache

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// flusher commits the index every flushInterval, or sooner when enough
// blocks are waiting, until Close.
func (s *Store) flusher() {
	defer close(s.stopped)
	tick := s.hooks.flushTick
	if tick == nil {
		t := time.NewTicker(flushInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.done:
			return
		case <-tick:
		case <-s.kick:
		}
		if err := s.flush(); err != nil {
			s.logOnce("index commit", "cache index commit failed; will retry", "err", err)
		}
	}
}

type pendingPut struct {
	e      *entry
	row    uint64
	meta   []byte         // header with chunk 0, unsealed; nil: unchanged
	chunks []pendingChunk // other chunks changed, by number
	reset  bool           // delete every chunk of the entry first
	atime  []byte         // the atime row, unsealed
	// writeAtime: the atime row changed (access time, allocated bytes),
	// or the entry is new.
	writeAtime bool
	// writeChecked: put checked (unsealed), or delete the row if nil.
	writeChecked bool
	checked      []byte
}

// pendingChunk is chunk idx of an entry, encoded (unsealed), or nil to
// delete it: none of its blocks is present.
type pendingChunk struct {
	idx int64
	val []byte
}

// flush writes dirty entries and deletions to the index in one
// transaction. Written blocks are made durable with one syncfs at most
// every syncEvery (and at Close), so a commit may record blocks whose
// bytes are still in the page cache; a power cut can then lose them, and
// their CRC check fails and drops them. On failure the work is put back
// for the next try.
func (s *Store) flush() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if s.db == nil {
		// A rebuild failed (see below): try again first.
		if err := s.rebuildIndex(errIndexDamaged); err != nil {
			return fmt.Errorf("commit cache index: %w", err)
		}
	}
	err := s.flushOnce()
	if errors.Is(err, errIndexDamaged) {
		// The failed work is back in dirty and deleted; the rebuild marks
		// every entry dirty and every deletion done, and the new index
		// takes it all now, not one tick later: this may be Close's
		// last flush.
		if rerr := s.rebuildIndex(err); rerr != nil {
			return fmt.Errorf("%w; rebuilding it: %w", err, rerr)
		}
		err = s.flushOnce()
	}
	if err == nil {
		s.cool()
		releaseIndexPages(s.db)
		reserveIndex(s.db.Path())
	}
	return err
}

// flushOnce is one commit of flush. LOCKS_REQUIRED(flushMu)
func (s *Store) flushOnce() error {
	c := s.takePending()
	s.unsynced = s.unsynced || c.newBlocks
	if len(c.dels) == 0 && len(c.puts) == 0 && !(c.closing && s.unsynced) {
		return nil
	}
	err := s.syncIfDue(c.closing)
	if err == nil {
		err = s.commit(&c)
	}
	if err != nil {
		s.putBack(&c)
		return fmt.Errorf("commit cache index: %w", err)
	}
	s.committed(c.dels)
	return nil
}

// deletedRows is an entry to delete from the index: its key, and its row.
type deletedRows struct {
	key string
	row uint64
}

// pendingCommit is what one commit takes from the store.
type pendingCommit struct {
	dels      []deletedRows
	puts      []pendingPut
	newBlocks bool // blocks were written since the last commit
	closing   bool // the store is closing: this is the last commit
}

// takePending takes the deletions and dirty entries waiting for a commit,
// encoded, and marks them clean.
func (s *Store) takePending() pendingCommit {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := pendingCommit{
		dels: make([]deletedRows, 0, len(s.deleted)),
		puts: make([]pendingPut, 0, len(s.dirty)),
	}
	for row, k := range s.deleted {
		c.dels = append(c.dels, deletedRows{key: k, row: row})
	}
	clear(s.deleted)
	for _, e := range s.dirty {
		p := pendingPut{e: e, row: e.row, reset: e.resetChunks}
		// Only what changed is copied, under the lock: the header with
		// chunk 0 (1 KiB at most besides the names) and dirty chunks.
		if e.metaDirty {
			p.meta = encodeHeader(&record{
				name: e.obj.Name, version: e.obj.Version, size: e.obj.Size, blockSize: s.blockSize,
				present: e.present, crcs: e.crcs,
			})
		}
		p.chunks = takeChunksLocked(e)
		if e.atimeDirty || e.metaDirty || e.bytes != e.savedBytes {
			ck, _ := coldKeyOf(e.key)
			p.writeAtime = true
			p.atime = encodeAtime(e.atime, e.bytes, ck)
			e.savedAtime, e.savedBytes = e.atime, e.bytes
		}
		if e.checkedDirty {
			p.writeChecked, p.checked = true, s.takeCheckedLocked(e)
		}
		e.metaDirty, e.atimeDirty, e.checkedDirty, e.resetChunks = false, false, false, false
		c.puts = append(c.puts, p)
	}
	clear(s.dirty)
	c.newBlocks = s.dirtyBlocks > 0
	s.dirtyBlocks = 0
	c.closing = s.closed
	return c
}

// syncIfDue flushes the data files written since the last sync, if
// syncEvery has passed since or the store is closing.
// LOCKS_REQUIRED(flushMu)
func (s *Store) syncIfDue(closing bool) error {
	if !s.unsynced || (!closing && time.Since(s.lastSync) < s.syncEvery) {
		return nil
	}
	// One syncfs covers every data file written since the last one,
	// where an fsync per file would cost one flush each.
	if err := s.hooks.syncData(s.dirFile); err != nil {
		return fmt.Errorf("sync cache data: %w", err)
	}
	s.unsynced, s.lastSync = false, time.Now()
	return nil
}

// releasePuts: a commit releases the index's pages (releaseTxPages)
// every releasePuts puts. A put that is not an append (an access time or
// a check rewritten, an entry's rows deleted) reads a leaf at a random
// place in the index, and the fault maps the pages around it that the
// page cache holds (64 KiB): when keys were hashes and every put was
// such, a second's commit of 3,000 new entries at 1.28M objects mapped
// most of the 550 MB index within milliseconds, before the releaser's
// next tick.
const releasePuts = 128

// txRows bounds the rows one index transaction writes or deletes; a
// commit of more takes several, releasing the index's pages after each.
// A transaction's end writes every leaf it changed from the nodes its
// puts read, which point into the map: that touches the leaves' pages
// again, after the last release within it, 64 KiB around each (47-58 MB
// of a 75 MB index for 4,000 new entries in one transaction, 5-13 MB in
// transactions of 256-512 rows). Each
// transaction costs its sync; an entry's rows are never split.
const txRows = 256

// commit writes c to the index, sealing each value (outside the store's
// lock), in transactions of about txRows rows: deletions first. A failure
// leaves the transactions before it committed; putBack returns all of c,
// and writing it again is harmless. LOCKS_REQUIRED(flushMu)
func (s *Store) commit(c *pendingCommit) error {
	dels, puts := c.dels, c.puts
	for first := true; first || len(dels)+len(puts) > 0; first = false {
		nd := min(len(dels), txRows/delRows)
		rows, np := nd*delRows, 0
		for np < len(puts) && rows < txRows {
			rows += puts[np].rows()
			np++
		}
		if err := s.commitTx(dels[:nd], puts[:np]); err != nil {
			return err
		}
		dels, puts = dels[nd:], puts[np:]
		if len(dels)+len(puts) > 0 {
			releaseIndexPages(s.db)
		}
	}
	return nil
}

// delRows is what commit counts a deletion as: its record, access time
// and check, and its chunks.
const delRows = 4

// rows is what commit counts p as: the rows it writes or deletes.
func (p *pendingPut) rows() int {
	n := len(p.chunks)
	for _, b := range []bool{p.meta != nil, p.reset, p.writeAtime, p.writeChecked} {
		if b {
			n++
		}
	}
	return max(n, 1)
}

// commitTx writes dels and puts to the index in one transaction.
// LOCKS_REQUIRED(flushMu)
func (s *Store) commitTx(dels []deletedRows, puts []pendingPut) error {
	return guard(func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			if s.hooks.inCommit != nil {
				s.hooks.inCommit()
			}
			b := tx.Bucket(rowsBucket)
			n := 0
			put := func(k, v []byte) error {
				v = seal(k, v)
				if s.hooks.indexPut != nil {
					s.hooks.indexPut(k, v)
				}
				if n++; n%releasePuts == 0 {
					releaseTxPages(tx)
				}
				return b.Put(k, v)
			}
			for _, d := range dels {
				if err := deleteEntryRows(b, d.row); err != nil {
					return err
				}
			}
			for _, p := range puts {
				if err := putOne(b, &p, put); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// putOne writes p's rows into b with put, which seals them.
func putOne(b *bolt.Bucket, p *pendingPut, put func(k, v []byte) error) error {
	if p.reset {
		if err := deleteChunks(b, p.row); err != nil {
			return err
		}
	}
	if p.writeAtime {
		if err := put(rowKey(p.row, tagAtime), p.atime); err != nil {
			return err
		}
	}
	// A nil value deletes its row: a check forgotten, a chunk emptied.
	putOrDelete := func(k, v []byte) error {
		if v == nil {
			return b.Delete(k)
		}
		return put(k, v)
	}
	if p.writeChecked {
		if err := putOrDelete(rowKey(p.row, tagChecked), p.checked); err != nil {
			return err
		}
	}
	if p.meta != nil {
		if err := put(rowKey(p.row, tagEntry), p.meta); err != nil {
			return err
		}
	}
	for _, ch := range p.chunks {
		if err := putOrDelete(chunkKey(p.row, ch.idx), ch.val); err != nil {
			return err
		}
	}
	return nil
}

// committed records that the deletions dels are committed.
func (s *Store) committed(dels []deletedRows) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, del := range dels {
		if d := s.deleting[del.key]; d != nil {
			d.committed = true
			if d.unlinked {
				delete(s.deleting, del.key)
			}
		}
	}
}

// putBack returns the work of a failed commit to the store, for the next.
func (s *Store) putBack(c *pendingCommit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range c.dels {
		s.deleted[d.row] = d.key
	}
	for _, p := range c.puts {
		if p.e.live {
			p.e.metaDirty = p.e.metaDirty || p.meta != nil
			p.e.atimeDirty = true
			p.e.checkedDirty = p.e.checkedDirty || p.writeChecked
			p.e.resetChunks = p.e.resetChunks || p.reset
			for _, ch := range p.chunks {
				markChunkLocked(p.e, ch.idx)
			}
			s.dirty[p.e.key] = p.e
		}
	}
	if c.newBlocks {
		s.dirtyBlocks++
	}
}

// logOnce logs msg the first time kind fails.
func (s *Store) logOnce(kind, msg string, args ...any) {
	s.mu.Lock()
	first := !s.loggedKinds[kind]
	s.loggedKinds[kind] = true
	s.mu.Unlock()
	if first {
		s.log.Error(msg, args...)
	}
}

// freshIndex moves the damaged index aside (logging msg) and opens an
// empty one in its place.
func (s *Store) freshIndex(msg string, why error) (*bolt.DB, error) {
	path := filepath.Join(s.dir, "index.db")
	if err := moveAside(path, s.log.Error, msg, why); err != nil {
		return nil, err
	}
	db, _, err := tryOpenIndex(path, nil, nil) // empty: nothing to convert
	if err != nil {
		return nil, fmt.Errorf("open cache index %s: %w", path, err)
	}
	return db, nil
}

// rebuildIndex replaces an index that a commit found damaged with a fresh
// one and marks every entry for the next commit: the index only mirrors
// what memory holds, so nothing cached is lost. If that fails, s.db is
// left nil and the next flush tries again. LOCKS_REQUIRED(flushMu)
func (s *Store) rebuildIndex(why error) error {
	// The damaged handle is dropped, not closed: a panic inside a write
	// transaction can leave bbolt's writer lock held (it reads the meta
	// page after taking it, with no deferred unlock), and Close would
	// then wait for it forever. Its descriptor and map are leaked, once;
	// its flock is on the file moved aside (our own lock is v1/lock).
	s.db = nil
	s.liveDB.Store(nil)
	db, err := s.freshIndex("cache index damaged; moving it aside and writing it again from memory", why)
	if err != nil {
		return err
	}
	s.db = db
	s.liveDB.Store(db)
	s.mu.Lock()
	defer s.mu.Unlock()
	// Cold entries are in the old index only: they go, their files
	// unlinked in the background (deleting keeps their keys from being
	// written again until then).
	var cold []*entry
	s.cold.each(func(sl coldSlot) {
		cold = append(cold, s.dropColdLocked(sl.key.String(), sl.row, sl.bytes))
	})
	s.cold = coldSet{}
	if len(cold) > 0 {
		go s.finishEvictions(cold)
	}
	for _, e := range s.entries {
		if e.live {
			e.atimeDirty = true
			s.markAllDirtyLocked(e)
		}
	}
	// The new index holds none of the evicted keys: their deletions are
	// committed.
	for k, d := range s.deleting {
		d.committed = true
		if d.unlinked {
			delete(s.deleting, k)
		}
	}
	clear(s.deleted)
	return nil
}

// markBlocksDirtyLocked notes that blocks [first, limit) of e changed, for
// the next commit to write their chunks. LOCKS_REQUIRED(s.mu)
func (s *Store) markBlocksDirtyLocked(e *entry, first, limit int64) {
	for c := first / chunkBlocks; c*chunkBlocks < limit; c++ {
		markChunkLocked(e, c)
	}
	s.dirty[e.key] = e
}

// markAllDirtyLocked marks e's header and every chunk with a block present,
// for an index that holds none of them. LOCKS_REQUIRED(s.mu)
func (s *Store) markAllDirtyLocked(e *entry) {
	e.metaDirty = true
	if e.verified != (fileStamp{}) {
		s.checkedDirtyLocked(e)
	}
	for c := int64(1); c < numChunks(e.nblocks); c++ {
		if !chunkEmpty(e.present, e.nblocks, c) {
			markChunkLocked(e, c)
		}
	}
	s.dirty[e.key] = e
}

// markChunkLocked marks chunk c of e dirty: chunk 0 is in the header.
// LOCKS_REQUIRED(Store.mu)
func markChunkLocked(e *entry, c int64) {
	if c == 0 {
		e.metaDirty = true
		return
	}
	if e.dirtyChunks == nil {
		e.dirtyChunks = map[int64]struct{}{}
	}
	e.dirtyChunks[c] = struct{}{}
}

// takeChunksLocked encodes e's dirty chunks, in order, and marks them
// clean. LOCKS_REQUIRED(Store.mu)
func takeChunksLocked(e *entry) []pendingChunk {
	if len(e.dirtyChunks) == 0 {
		return nil
	}
	out := make([]pendingChunk, 0, len(e.dirtyChunks))
	for c := range e.dirtyChunks {
		p := pendingChunk{idx: c}
		if !chunkEmpty(e.present, e.nblocks, c) {
			p.val = appendChunk(make([]byte, 0, chunkLen(e.nblocks, c)+4), e.present, e.crcs, e.nblocks, c)
		}
		out = append(out, p)
	}
	clear(e.dirtyChunks)
	slices.SortFunc(out, func(a, b pendingChunk) int { return cmp.Compare(a.idx, b.idx) })
	return out
}
