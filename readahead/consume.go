package readahead

// Parts fetched ahead of their reader are stored in the cache when the
// reader comes, not when they arrive. A file fetched ahead (OpenAhead,
// up to 16 small files ahead of a reader in listing order) would
// otherwise reach the cache before its reader: on a dataset larger than
// the cache, in scan-resistant mode, it enters at the least recent end,
// where the next file fetched evicts it, and its reader then reads it
// from memory, or fetches it again if memory let it go; and a read of it
// from the cache a while after its write looks like a reuse. Stored at
// its first read, the cache sees what it sees without reading ahead: a
// write, and its reader at once. Until then the part is in memory only
// (its budget and reclaim rules are those of any part of a handle opened
// ahead); a part nobody reads is never stored.

// holdBack reports whether p, fetched, waits for a reader before it is
// stored: readahead of a handle opened ahead that nobody has read yet,
// and no byte of p read. It keeps p's CRCs for the store.
func (f *Fetcher) holdBack(p *part, crcs []uint32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !p.spec || p.read || !p.owner.unread.Load() || crcs == nil {
		return false
	}
	p.crcs = crcs
	return true
}

// storeLocked stores p in the cache, in the background, if it was held
// back and is not being stored: called at each read of p. p stays in
// the table until the store ends, so that nobody fetches its bytes
// again meanwhile. LOCKS_REQUIRED(f.mu)
func (f *Fetcher) storeLocked(p *part) {
	if p.crcs == nil || p.storing || f.closed || p.buf == nil {
		return
	}
	p.storing = true
	p.refs++
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		n := f.cache.WriteBlocksCRC(p.owner.cacheKey, p.first, p.buf, p.crcs)
		f.mu.Lock()
		p.crcs, p.storing = nil, false
		p.inCache = int64(n) >= p.limit-p.first
		// Kept for its reader still, but reclaimable as any stored part.
		p.stored = p.inCache
		tell := f.readLocked(p, false)
		if p.elem == nil || p.left == 0 {
			// Read to its end meanwhile, or never kept (settle).
			f.dropLocked(p)
		}
		f.unrefLocked(p)
		f.mu.Unlock()
		if tell {
			f.cache.Consumed(p.owner.cacheKey)
		}
	}()
}

// consumeLocked records that a reader copied n bytes of block i out of
// p; a kept part read to the end leaves memory. It reports whether the
// cache must be told that a reader had p's bytes (readLocked).
// LOCKS_REQUIRED(f.mu)
func (f *Fetcher) consumeLocked(p *part, i, n int64) (tell bool) {
	tell = f.readLocked(p, true)
	f.storeLocked(p)
	if p.consumed == nil || p.left == 0 {
		return tell
	}
	if p.elem != nil {
		f.resident.MoveToBack(p.elem)
	}
	j := i - p.first
	bl := min((i+1)*f.bs, p.end) - i*f.bs
	if p.consumed[j] >= bl {
		return tell
	}
	p.consumed[j] += n
	if p.consumed[j] >= bl {
		p.left--
		if p.left == 0 && p.elem != nil {
			f.doneLocked(p)
		}
	}
	return tell
}

// reclaimLocked drops kept part p for memory, and reports whether its
// memory is free now. A part held back from the cache is stored first,
// so that its reader finds it there: it leaves the resident list at
// once and memory when its store ends, which wakes the budget's waiters
// (Release). LOCKS_REQUIRED(f.mu)
func (f *Fetcher) reclaimLocked(p *part) bool {
	if p.crcs == nil || p.storing || f.closed {
		f.dropLocked(p)
		return true
	}
	f.storeLocked(p)
	f.resident.Remove(p.elem)
	p.elem = nil
	return false
}

// doneLocked ends the keeping of kept part p, read to its end: it leaves
// memory, or, while its store runs, the resident list only (the store
// then drops it). LOCKS_REQUIRED(f.mu)
func (f *Fetcher) doneLocked(p *part) {
	if !p.storing {
		f.dropLocked(p)
		return
	}
	f.resident.Remove(p.elem)
	p.elem = nil
}

// readLocked records that a reader had bytes of p (if read), and reports
// whether the cache must now be told (Consumed): once per part, when it
// holds the part's bytes and a reader had some of them.
// LOCKS_REQUIRED(f.mu)
func (f *Fetcher) readLocked(p *part, read bool) bool {
	p.read = p.read || read
	if !p.read || !p.inCache || p.told {
		return false
	}
	p.told = true
	return true
}
