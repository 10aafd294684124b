package readahead

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePageSize is the size of a transparent huge page (the PMD size), or
// 0 where the kernel has none, or where GODEBUG=disablethp=1 asks the Go
// runtime to keep its heap off them (ferry's buffers follow).
var hugePageSize = sync.OnceValue(func() int64 {
	for _, kv := range strings.Split(os.Getenv("GODEBUG"), ",") {
		if strings.TrimSpace(kv) == "disablethp=1" {
			return 0
		}
	}
	if mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || strings.Contains(string(mode), "[never]") {
		return 0
	}
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n&(n-1) != 0 || n > 1<<30 {
		return 0
	}
	return n
})

// mappedIdle is how long a freed mapped buffer is kept for reuse before
// its memory goes back to the system.
const mappedIdle = 10 * time.Second

// mappedBuffers hands out buffers from anonymous mappings outside the Go
// heap, and keeps them for reuse. Buffers of a huge page or more are
// aligned to a huge page and advised MADV_HUGEPAGE; smaller ones (and all
// of them where the kernel has no transparent huge pages) are plain
// mappings of whole pages.
//
// Why huge pages: where transparent huge pages are "madvise" (Ubuntu's
// default, among others) the Go heap gets none, and a readahead buffer is
// touched one 4 KiB page at a time, then read into from sockets and
// copied out to the kernel through 1024 page-table entries per 4 MiB
// part. On a paravirtualised guest where touching memory is dear, huge
// pages for ferry alone took a cold 4-stream read from 55% to 71-83% of
// the link (docs/notes/2026-12-01-huge-pages.md). The Go heap's large
// objects are aligned to 8 KiB only, so advising them in place covers
// half of each part at best.
//
// Why every size, not only whole huge pages: buffers of other sizes (a
// demand read's 1 MiB, a young stream's graded parts, a part cut short
// at a window's growth) used to come from the heap, where the garbage
// collector lets the heap grow to twice what is live, and returns freed
// spans to the system only slowly. Reading regions deep in a 200 GiB
// object, where every stream starts young, held 834-849 MiB against a
// 512 MiB budget (docs/notes/2026-12-02-huge-objects.md). A mapping is
// the budget's bytes and no more, and goes back to the system when
// unmapped.
//
// Memory: mapped bytes, in use or free, never exceed limit (the memory
// budget): a new mapping first unmaps free buffers of other sizes. Free
// buffers are kept within the part of the budget not in use, and within
// a quarter of the limit (keepFree, after every buffer handed out), so
// that buffers in use and free ones never hold more than the budget
// together, and a read whose sizes differ from the last one's (a young
// stream's graded parts after a steady one's whole parts) does not map
// its own beside a budget's worth of free ones: the heap's own overhead
// (FUSE buffers, the GC's headroom) comes on top of the mapped bytes.
// A free buffer is unmapped after mappedIdle unused, or at close. Buffers are
// only unmapped while free, so the pool's callers must not touch a buffer
// after put, as with any pool; here a slip faults instead of reading
// another part's bytes.
type mappedBuffers struct {
	// Constant data
	hp       int64 // huge page size, or 0 where there are none
	page     int64 // the system's page size
	limit    int64
	idle     time.Duration
	onChange func(mapped int64) // Config.OffHeap, or nil

	// Mutable state
	mu        sync.Mutex
	free      map[int64][]freeBuffer // by size, most recently freed last
	owned     map[*byte]int64        // every mapping, by first byte: its size
	mapped    int64                  // sum of owned
	freeBytes int64                  // sum of free
	timer     *time.Timer            // pending trim, or nil
	closed    bool
}

type freeBuffer struct {
	b  []byte
	at time.Time
}

// newMappedBuffers returns a pool for up to limit bytes, or nil if that
// is less than a page.
func newMappedBuffers(limit int64) *mappedBuffers {
	page := int64(os.Getpagesize())
	if limit < page {
		return nil
	}
	return &mappedBuffers{
		hp: hugePageSize(), page: page, limit: limit, idle: mappedIdle,
		free:  make(map[int64][]freeBuffer),
		owned: make(map[*byte]int64),
	}
}

// fits reports whether buffers of capacity c come from here: whole pages.
func (m *mappedBuffers) fits(c int64) bool {
	return m != nil && c > 0 && c%m.page == 0
}

// get returns a buffer of capacity c (fits(c)), or nil if none can be
// mapped: the caller then uses the heap.
func (m *mappedBuffers) get(c int64) []byte {
	m.mu.Lock()
	if l := m.free[c]; len(l) > 0 {
		b := l[len(l)-1].b
		l[len(l)-1] = freeBuffer{}
		m.free[c] = l[:len(l)-1]
		m.freeBytes -= c
		m.mu.Unlock()
		return b
	}
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	// Room first: free buffers of other sizes give way, oldest first.
	for m.mapped+c > m.limit {
		if !m.unmapOldestLocked() {
			m.mu.Unlock()
			return nil
		}
	}
	m.mapped += c // reserved while mapping outside the lock
	m.mu.Unlock()

	b := m.mmap(c)
	m.mu.Lock()
	defer m.mu.Unlock()
	if b == nil {
		m.mapped -= c
		m.changedLocked() // a change in between may have told the reservation
		return nil
	}
	m.owned[unsafe.SliceData(b)] = c
	m.changedLocked()
	return b
}

// put takes back b if it is one of ours, and reports whether it was.
func (m *mappedBuffers) put(b []byte) bool {
	if m == nil || cap(b) == 0 {
		return false
	}
	b = b[:cap(b)]
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.owned[unsafe.SliceData(b)]
	if !ok {
		return false
	}
	if m.closed {
		m.unmapLocked(b, c)
		return true
	}
	m.free[c] = append(m.free[c], freeBuffer{b: b, at: time.Now()})
	m.freeBytes += c
	if m.timer == nil {
		m.timer = time.AfterFunc(m.idle, m.trim)
	}
	return true
}

// trim unmaps the buffers free for idle or longer.
func (m *mappedBuffers) trim() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.timer = nil
	now := time.Now()
	var next time.Time // the oldest buffer kept
	for c, l := range m.free {
		kept := l[:0]
		for _, fb := range l {
			if now.Sub(fb.at) >= m.idle {
				m.unmapLocked(fb.b, c)
				m.freeBytes -= c
				continue
			}
			kept = append(kept, fb)
			if next.IsZero() || fb.at.Before(next) {
				next = fb.at
			}
		}
		clear(l[len(kept):])
		m.free[c] = kept
	}
	if !next.IsZero() && !m.closed {
		m.timer = time.AfterFunc(m.idle-now.Sub(next), m.trim)
	}
}

// close unmaps every free buffer now, and each buffer still in use when it
// is put back.
func (m *mappedBuffers) close() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	for c, l := range m.free {
		for _, fb := range l {
			m.unmapLocked(fb.b, c)
		}
		delete(m.free, c)
	}
	m.freeBytes = 0
}

// snapshot returns the bytes mapped and, of them, free.
func (m *mappedBuffers) snapshot() (mapped, free int64) {
	if m == nil {
		return 0, 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mapped, m.freeBytes
}

// freeShare: free buffers are kept within limit/freeShare. A steady read
// puts back and takes again a few parts at a time; a quarter of the
// budget covers a read's whole window of parts coming back at once.
const freeShare = 4

// keepFree unmaps free buffers, oldest first, until at most room bytes
// (and limit/freeShare) are free.
func (m *mappedBuffers) keepFree(room int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.freeBytes > max(min(room, m.limit/freeShare), 0) && m.unmapOldestLocked() {
	}
}

// unmapOldestLocked unmaps the free buffer freed longest ago, if any.
// LOCKS_REQUIRED(m.mu)
func (m *mappedBuffers) unmapOldestLocked() bool {
	var (
		oc    int64
		found bool
		at    time.Time
	)
	for c, l := range m.free {
		if len(l) > 0 && (!found || l[0].at.Before(at)) {
			oc, at, found = c, l[0].at, true
		}
	}
	if !found {
		return false
	}
	l := m.free[oc]
	m.unmapLocked(l[0].b, oc)
	l[0] = freeBuffer{}
	m.free[oc] = l[1:]
	m.freeBytes -= oc
	return true
}

// LOCKS_REQUIRED(m.mu)
func (m *mappedBuffers) unmapLocked(b []byte, c int64) {
	p := unsafe.SliceData(b)
	delete(m.owned, p)
	m.mapped -= c
	_ = unix.MunmapPtr(unsafe.Pointer(p), uintptr(c))
	m.changedLocked()
}

// LOCKS_REQUIRED(m.mu)
func (m *mappedBuffers) changedLocked() {
	if m.onChange != nil {
		m.onChange(m.mapped)
	}
}

// mmap maps c bytes, or returns nil. From a huge page on, the mapping is
// aligned to a huge page and advised to use huge pages (a smaller one
// could hold none).
func (m *mappedBuffers) mmap(c int64) []byte {
	if m.hp == 0 || c < m.hp {
		p, err := unix.MmapPtr(-1, 0, nil, uintptr(c), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil
		}
		return unsafe.Slice((*byte)(p), c)
	}
	// Map a huge page more than needed, then unmap the unaligned ends.
	n := uintptr(c + m.hp)
	p, err := unix.MmapPtr(-1, 0, nil, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil
	}
	hp := uintptr(m.hp)
	head := (hp - uintptr(p)%hp) % hp
	if head > 0 {
		_ = unix.MunmapPtr(p, head)
	}
	if tail := n - head - uintptr(c); tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(p, head+uintptr(c)), tail)
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, head)), c)
	// Advice only: where it cannot be taken, the buffer works all the same.
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	return b
}
