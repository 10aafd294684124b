package fs

import (
	"cmp"
	"sync"
	"time"
)

// Attributes with listings. The kernel asks for every page of a listing
// with READDIRPLUS (readdirplus without "auto", mount.go), and ferry
// chooses, page by page, how to answer: with each entry's attributes and
// inode, which the kernel keeps as a dentry, so that opening or stating
// the name later costs no lookup round trip; or with names only (child
// 0: the kernel keeps nothing), as a plain READDIR answers.
//
// Attributes are not free: the kernel makes an inode for every name, and
// ferry one of its own (about 800 bytes), until the kernel forgets them;
// and the answers are four times the bytes. A names-only listing of
// 50,000 entries (`ls -f`, page cache dropped before each) took 195-297
// ms with attributes on every page, 94-171 ms with names only and 51-73
// ms with plain READDIRs, and ferry kept 37 MB more resident with
// attributes. The kernel's "auto" mode, which ferry used before, gives
// attributes with a listing's first page only, and with a later page only
// if the kernel revalidated or looked up a name of the directory since
// the page before. A data loader lists the whole directory and then opens
// every file, so it got the first page's worth of dentries and a lookup
// round trip per file after that: 4000 warm 128 KiB files read by 8
// readers after a listing ran about 15% faster with attributes on every
// page (docs/notes/2026-12-01-warm-small-files-round-trips.md).
//
// So a page has attributes when
//   - it is the first of a listing (offset 0), as in "auto";
//   - a child of the directory was looked up since the handle's page
//     before (a lister that stats what it lists, `ls -l`), and from then
//     on for the rest of the handle's listing ("auto" switches on the
//     kernel's revalidations of names it holds, which ferry does not see,
//     so ferry switches for good);
//   - or the directory's files were used after its listings: every page
//     of the listings of a cycle that began when the one before it saw
//     enough use. A cycle's use is the larger of the lookups that found
//     one of the directory's children and the opens of them (a file
//     looked up and opened counts once, with the kernel holding its name
//     or not); enough is a quarter of the most entries one listing handed
//     out. A listing that finds enough use begins a new cycle with
//     attributes; a listing that finds the cycle with too little use
//     after unusedListings listings and unusedAge begins one with names
//     only; any other listing joins the cycle. So several listers, one
//     after the other while the files are being opened, or a listing
//     read again from its start, fall in one cycle, and a directory
//     nobody opens files of any more goes back to names only.
//
// What is remembered: that, per directory, for at most dirsTracked
// directories (then forgotten all at once).
type listUse struct {
	mu    sync.Mutex
	dirs  map[string]*dirUse // GUARDED_BY(mu); by directory path
	limit int                // directories remembered; 0 is dirsTracked (tests lower it)
}

const (
	// dirsTracked bounds the directories whose use is remembered.
	dirsTracked = 10_000
	// unusedListings listings of a directory, over at least unusedAge,
	// with too little use of its files end its cycle.
	unusedListings = 16
	unusedAge      = time.Minute
)

// dirUse is how one directory's listings are used.
type dirUse struct {
	size     int       // the most entries one listing handed out
	found    int       // lookups that found a child, in this cycle
	opens    int       // opens of children, in this cycle
	listings int       // listings begun in this cycle
	began    time.Time // when this cycle began
	full     bool      // this cycle's listings give attributes on every page
	lookups  uint64    // lookups that found a child, since first listed
}

// listingPage reports whether the readdirplus page of h at offset off
// gives attributes; now is the time.
//
// LOCKS_REQUIRED(h.mu)
func (l *listUse) listingPage(h *dirHandle, off int, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	u, ok := l.dirs[h.path]
	if !ok {
		if l.dirs == nil || len(l.dirs) >= cmp.Or(l.limit, dirsTracked) {
			l.dirs = make(map[string]*dirUse)
		}
		u = &dirUse{began: now}
		l.dirs[h.path] = u
	}
	if off == 0 {
		use := max(u.found, u.opens)
		switch {
		case use > 0 && 4*use >= u.size:
			u.full = true
			u.found, u.opens, u.listings, u.began = 0, 0, 0, now
		case u.listings >= unusedListings && now.Sub(u.began) >= unusedAge:
			u.full = false
			u.found, u.opens, u.listings, u.began = 0, 0, 0, now
		}
		u.listings++
		h.use, h.plusAll, h.plusStick, h.lookupsSeen = u, u.full, false, u.lookups
		return true
	}
	switch {
	case h.use != u:
		// Forgotten since (dirsTracked): no lookup to go by.
		h.use, h.lookupsSeen = u, u.lookups
	case u.lookups != h.lookupsSeen:
		h.plusStick = true
		h.lookupsSeen = u.lookups
	}
	return h.plusAll || h.plusStick
}

// handedOut records that h's listing has handed out its first n entries.
//
// LOCKS_REQUIRED(h.mu)
func (l *listUse) handedOut(h *dirHandle, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h.use.size = max(h.use.size, n) // set by listingPage, for this page
}

// used records a lookup that found a child of dir (lookup), or an open
// of one. A directory never listed is not tracked.
func (l *listUse) used(dir string, lookup bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	u, ok := l.dirs[dir]
	if !ok {
		return
	}
	if lookup {
		u.found++
		u.lookups++
	} else {
		u.opens++
	}
}
