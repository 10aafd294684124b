package filecache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// flusher commits the index every flushInterval, or sooner when enough
// blocks are waiting, until Close.
func (s *Store) flusher() {
	defer close(s.stopped)
	t := time.NewTicker(flushInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		case <-s.kick:
		}
		if err := s.flush(); err != nil {
			s.logOnce("index commit", "cache index commit failed; will retry", "err", err)
		}
	}
}

type pendingPut struct {
	e          *entry
	key        []byte
	meta       []byte // nil: only the access time changed
	atime      [8]byte
	writeAtime bool
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

// pendingCommit is what one commit takes from the store.
type pendingCommit struct {
	dels      [][]byte // keys to delete
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
		dels: make([][]byte, 0, len(s.deleted)),
		puts: make([]pendingPut, 0, len(s.dirty)),
	}
	for k := range s.deleted {
		c.dels = append(c.dels, []byte(k))
	}
	clear(s.deleted)
	for k, e := range s.dirty {
		p := pendingPut{e: e, key: []byte(k)}
		if e.metaDirty {
			p.meta = encodeRecord(&record{
				name: e.obj.Name, version: e.obj.Version, size: e.obj.Size, blockSize: s.blockSize,
				bytes: e.bytes, present: e.present, crcs: e.crcs,
			})
		}
		if e.atimeDirty || e.metaDirty {
			p.writeAtime = true
			binary.LittleEndian.PutUint64(p.atime[:], uint64(e.atime))
		}
		e.metaDirty, e.atimeDirty = false, false
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

// commit writes c to the index in one transaction. LOCKS_REQUIRED(flushMu)
func (s *Store) commit(c *pendingCommit) error {
	return guard(func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			if s.hooks.inCommit != nil {
				s.hooks.inCommit()
			}
			eb, ab := tx.Bucket(entriesBucket), tx.Bucket(atimeBucket)
			for _, k := range c.dels {
				if err := eb.Delete(k); err != nil {
					return err
				}
				if err := ab.Delete(k); err != nil {
					return err
				}
			}
			for _, p := range c.puts {
				if p.meta != nil {
					if err := eb.Put(p.key, p.meta); err != nil {
						return err
					}
				}
				if p.writeAtime {
					if err := ab.Put(p.key, p.atime[:]); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
}

// committed records that the deletions of keys dels are committed.
func (s *Store) committed(dels [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range dels {
		if d := s.deleting[string(k)]; d != nil {
			d.committed = true
			if d.unlinked {
				delete(s.deleting, string(k))
			}
		}
	}
}

// putBack returns the work of a failed commit to the store, for the next.
func (s *Store) putBack(c *pendingCommit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range c.dels {
		s.deleted[string(k)] = struct{}{}
	}
	for _, p := range c.puts {
		if p.e.live {
			p.e.metaDirty = p.e.metaDirty || p.meta != nil
			p.e.atimeDirty = true
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
	db, _, _, err := tryOpenIndex(path)
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
	db, err := s.freshIndex("cache index damaged; moving it aside and writing it again from memory", why)
	if err != nil {
		return err
	}
	s.db = db
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.entries {
		if e.live {
			e.metaDirty, e.atimeDirty = true, true
			s.dirty[k] = e
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
