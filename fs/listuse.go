package fs

import "sync"

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
// ms with attributes on every page, 94-123 ms with names only and 51-66 ms
// with plain READDIRs, and ferry kept 37 MB more resident with
// attributes. The kernel's "auto" mode, which ferry used before, gives
// attributes with a listing's first page only, and with a later page only
// if the kernel revalidated or looked up a name of the directory since
// the page before. A data loader lists the whole directory and then opens
// every file, so it got the first page's worth of dentries and a lookup
// round trip per file after that: 4000 warm 128 KiB files read by 8
// readers after a listing ran 15-18% faster with attributes on every
// page (docs/operations.md, "Warm small files, round trips").
//
// So a page has attributes when
//   - it is the first of a listing (offset 0), as in "auto";
//   - a child of the directory was looked up since the handle's page
//     before (a lister that stats what it lists, `ls -l`), and from then
//     on for the rest of the handle's listing ("auto" switches on the
//     kernel's revalidations of names it holds, which ferry does not see,
//     so ferry switches for good);
//   - or, for every page of a listing, the directory's recent listings
//     were followed by lookups and opens of its children (a lookup and an
//     open count one each) at least a quarter as many as the entries they
//     handed out: the files of what is listed get opened. "Recent": both
//     counts are halved when a listing begins while the entries counted
//     are over four times the most one listing handed out, so that a
//     directory whose files are no longer opened soon goes back to names
//     only. Counting over listings, not from one to the next, keeps the
//     choice steady with several listers at once and with a listing read
//     again from its start.
//
// What is remembered: those counts per directory, for at most
// dirsTracked directories (then forgotten all at once).
type listUse struct {
	mu   sync.Mutex
	dirs map[string]*dirUse // GUARDED_BY(mu); by directory path
}

// dirUse is how one directory's listings were used.
type dirUse struct {
	listed  int    // entries handed out by recent listings
	used    int    // lookups and opens of children meanwhile
	size    int    // the most entries one listing handed out
	lookups uint64 // lookups of children since the directory was first listed
}

// listingPage reports whether the readdirplus page of h at offset off
// gives attributes.
//
// LOCKS_REQUIRED(h.mu)
func (l *listUse) listingPage(h *dirHandle, off int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	u, ok := l.dirs[h.path]
	if !ok {
		if l.dirs == nil || len(l.dirs) >= dirsTracked {
			l.dirs = make(map[string]*dirUse)
		}
		u = &dirUse{}
		l.dirs[h.path] = u
	}
	if off == 0 {
		if u.listed > 4*u.size {
			u.listed, u.used = u.listed/2, u.used/2
		}
		h.plusAll = u.listed > 0 && 4*u.used >= u.listed
		h.plusStick = false
		h.lookupsSeen = u.lookups
		return true
	}
	if u.lookups != h.lookupsSeen {
		h.plusStick = true
		h.lookupsSeen = u.lookups
	}
	return h.plusAll || h.plusStick
}

// handedOut records that h's listing has handed out its first n entries
// (each entry of a handle counts once, however often it is read).
//
// LOCKS_REQUIRED(h.mu)
func (l *listUse) handedOut(h *dirHandle, n int) {
	if n <= h.handed {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if u, ok := l.dirs[h.path]; ok {
		u.listed += n - h.handed
		u.size = max(u.size, n)
	}
	h.handed = n
}

// used records a lookup (lookup) or an open of a child of dir. A
// directory never listed is not tracked.
func (l *listUse) used(dir string, lookup bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	u, ok := l.dirs[dir]
	if !ok {
		return
	}
	u.used++
	if lookup {
		u.lookups++
	}
}
