package readahead

import (
	"context"
	"sync/atomic"
	"time"
)

// stream is one sequential cursor on a handle, with its readahead window.
type stream struct {
	// next is the end of the furthest read seen: where the reader goes next.
	next int64
	// seq counts steps, reads that advanced next from within the gap
	// (the creating read counts as 1, or seqReads at offset 0).
	seq int
	// window is how far ahead of next readahead reaches; it doubles each
	// time the reader passes growAt and halves when readahead is dropped.
	window, growAt int64
	// frontier is where issued readahead ends (block aligned).
	frontier int64
	// inflight is the bytes of this stream's readahead not yet complete.
	inflight int64
	// issued counts the readahead parts the stream has issued (the first
	// partsPerWindow are graded, see prefetch).
	issued int
	// last is the detector's read count at the stream's last step.
	last int64
	// fromStart: the stream began at offset 0, the start of a file read
	// whole (most likely), so its first window is StartWindow.
	fromStart bool
	// cursor mirrors next, and lastRead is when a read last belonged to
	// the stream (unix nanoseconds): readahead of other handles reads
	// them under Fetcher.mu, not this handle's mu, to choose which kept
	// part to drop (Fetcher.victimLocked).
	cursor, lastRead atomic.Int64

	// ctx is cancelled when the stream is evicted or its handle closes;
	// the stream's speculative fetches run under it.
	ctx    context.Context
	cancel context.CancelFunc
}

// seqReads is how many reads in a row make a stream sequential. Three,
// not two: a random read that happens to land just after another would
// otherwise start readahead now and then.
const seqReads = 3

func (s *stream) sequential() bool { return s.seq >= seqReads }

// detector tells sequential from random reads on one handle. It keeps up to
// max streams in LRU order so that several interleaved sequential readers
// of one file (or one reader plus stray random reads) each keep a window.
//
// A read belongs to a stream when it starts at most reorder bytes behind
// the stream's cursor (kernel async reads arrive out of order) or at most
// gap bytes (or up to the readahead frontier) ahead of it. Only reads that
// move the cursor forward from within gap bytes of it are steps: they
// count towards being sequential and drive readahead.
type detector struct {
	reorder, gap int64
	max          int
	initial      int64
	// streams in LRU order, most recently used last.
	streams []*stream
	// reads counts observed reads.
	reads  int64
	parent context.Context
}

// observe classifies the read [off, off+n). It returns the stream it now
// belongs to, whether the read was a step of it, and a stream evicted to
// make room (whose speculative work the caller cancels), if any.
func (d *detector) observe(off, n int64) (s *stream, step bool, evicted *stream) {
	d.reads++
	best, bestAdv, bestDist := -1, false, int64(0)
	for i, c := range d.streams {
		if off < c.next-d.reorder {
			continue
		}
		ahead := d.gap
		if c.frontier-c.next > ahead {
			ahead = c.frontier - c.next
		}
		if off > c.next+ahead {
			continue
		}
		adv := off+n > c.next
		dist := off - c.next
		if dist < 0 {
			dist = -dist
		}
		// Prefer a stream the read advances, then the closest cursor.
		if best < 0 || (adv && !bestAdv) || (adv == bestAdv && dist < bestDist) {
			best, bestAdv, bestDist = i, adv, dist
		}
	}
	if best >= 0 {
		s = d.streams[best]
		s.lastRead.Store(time.Now().UnixNano())
		d.streams = append(append(d.streams[:best:best], d.streams[best+1:]...), s)
		if !bestAdv {
			return s, false, nil
		}
		jump := off > s.next+d.gap
		s.next = off + n
		s.cursor.Store(s.next)
		if jump {
			// Into the readahead frontier but past the gap: the cursor
			// follows (a reader may skip ahead), but it is no step of a
			// sequential run. Random records landing anywhere in a
			// prefetched range would otherwise grow the window for
			// nobody (one stream grew to 128 MiB that way).
			return s, false, nil
		}
		if d.reads-s.last > d.staleReads() {
			s.seq = 1
		}
		s.seq++
		s.last = d.reads
		return s, true, nil
	}
	s = &stream{next: off + n, seq: 1, window: d.initial, last: d.reads}
	if off == 0 {
		// Like the kernel's readahead: a read at the start of a file is
		// taken as the start of a sequential read.
		s.seq = seqReads
		s.fromStart = true
	}
	s.growAt = s.next + s.window
	s.cursor.Store(s.next)
	s.lastRead.Store(time.Now().UnixNano())
	s.ctx, s.cancel = context.WithCancel(d.parent)
	if len(d.streams) >= d.max {
		evicted = d.streams[0]
		d.streams = d.streams[1:]
	}
	d.streams = append(d.streams, s)
	return s, true, evicted
}

// staleReads is how many reads on the handle may pass between two reads
// that advance a stream for the second to extend its run; a later one
// starts the count again. The interleaved streams of up to max sequential
// readers each advance every few reads; random reads over back-to-back
// records (ArrayRecord, several readers on one handle) extend some stream
// now and then, and over enough reads would otherwise add up to a false
// sequential stream that reads ahead for nobody.
func (d *detector) staleReads() int64 { return 2 * int64(max(d.max, 1)) }
