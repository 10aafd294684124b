package readahead

// What readers take out of parts in memory: a part kept for its reader
// leaves memory once read to its end, and the cache learns that the bytes
// it stored were read (BlockCache.Consumed), which it cannot see itself
// when they come from memory.

// consumeLocked records that a reader copied n bytes of block i out of
// p; a kept part read to the end leaves memory. It reports whether the
// cache must be told that a reader had p's bytes (readLocked).
// LOCKS_REQUIRED(f.mu)
func (f *Fetcher) consumeLocked(p *part, i, n int64) (tell bool) {
	tell = f.readLocked(p, true)
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
			f.dropLocked(p)
		}
	}
	return tell
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
