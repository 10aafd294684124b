package metadata

import (
	"context"
	"sort"
	"strings"

	"ferry/bucket"
)

// Lister reads one directory's listing page by page, as a reader of the
// directory goes further, and keeps what it read: an index handed out
// once always means the same entry. Once the last page is read the
// listing is cached (when the TTL allows). A Lister is not safe for
// concurrent use: its owner serialises NextPage and reads of its fields.
type Lister struct {
	// Path is the directory, "" for the root.
	Path string
	// Entries read so far, in listing order.
	Entries []DirEntry
	// Complete: every page has been read.
	Complete bool

	index   map[string]int // name -> position in Entries
	token   string         // continuation of the next page
	lastKey string         // greatest object name or prefix listed so far
	seq     uint64         // when the first page was asked for, 0 before
}

// NewLister starts a listing of dir: complete at once from a fresh cached
// listing (whose entries it shares), else empty, to be read by NextPage.
func (c *Cache) NewLister(dir string) *Lister {
	l := &Lister{Path: dir, index: make(map[string]int)}
	if cached, ok := c.cache.listing(dir); ok {
		l.Entries = cached.entries // shared, never modified: a complete Lister appends nothing
		l.Complete = true
	}
	return l
}

// Seq orders the listing's answers against other requests' (Entry.Seq).
func (l *Lister) Seq() uint64 { return l.seq }

// Settled reports whether entry i can no longer change: a file "x" may
// still turn into a directory while the listing has not reached "x/" (it
// sorts after "x.txt", "x-1" and friends, possibly pages later).
func (l *Lister) Settled(i int) bool {
	e := l.Entries[i]
	return l.Complete || e.Kind == Dir || l.lastKey >= DirPrefix(l.Path)+e.Name+"/"
}

// NextPage appends the next page of the listing to l.Entries. Names that
// cannot be POSIX names are left out (and counted, NoteHidden).
func (c *Cache) NextPage(ctx context.Context, l *Lister) error {
	prefix := DirPrefix(l.Path)
	if l.seq == 0 {
		l.seq = c.cache.begin()
	}
	page, err := c.bucket.List(ctx, &bucket.ListRequest{
		Prefix:            prefix,
		Delimiter:         "/",
		ContinuationToken: l.token,
		MaxResults:        c.pageSize,
	})
	if err != nil {
		return err
	}
	l.add(c.pageEntries(page, prefix, l.seq))
	if n := len(page.Objects); n > 0 && page.Objects[n-1].Name > l.lastKey {
		l.lastKey = page.Objects[n-1].Name
	}
	if n := len(page.Prefixes); n > 0 && page.Prefixes[n-1] > l.lastKey {
		l.lastKey = page.Prefixes[n-1]
	}
	l.token = page.ContinuationToken
	if l.token == "" {
		l.Complete = true
		// The cache owns its copy; the Lister appends nothing more but
		// may still be read.
		c.cache.putListing(l.Path, append([]DirEntry(nil), l.Entries...), l.seq)
	}
	return nil
}

// pageEntries turns one page of the store's listing under prefix into
// sorted entries (valid names only), each stamped seq.
func (c *Cache) pageEntries(page *bucket.Listing, prefix string, seq uint64) []DirEntry {
	out := make([]DirEntry, 0, len(page.Objects)+len(page.Prefixes))
	for _, p := range page.Prefixes {
		name := strings.TrimSuffix(strings.TrimPrefix(p, prefix), "/")
		if !ValidName(name) {
			c.NoteHidden(p)
			continue
		}
		out = append(out, DirEntry{Name: name, Entry: Entry{Kind: Dir, Seq: seq}})
	}
	for _, o := range page.Objects {
		if o.Name == prefix {
			continue // this directory's own marker
		}
		name := strings.TrimPrefix(o.Name, prefix)
		if !ValidName(name) {
			c.NoteHidden(o.Name)
			continue
		}
		out = append(out, DirEntry{Name: name, Entry: Entry{Kind: File, Obj: o, Seq: seq}})
	}
	// Objects and prefixes come as two sorted lists; show one sorted list.
	// Directories sort before files of the same name so that add keeps
	// the directory.
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Kind == Dir && out[j].Kind != Dir
	})
	return out
}

// add appends a page's entries, each name once.
func (l *Lister) add(page []DirEntry) {
	for _, e := range page {
		i, seen := l.index[e.Name]
		switch {
		case !seen:
			l.index[e.Name] = len(l.Entries)
			l.Entries = append(l.Entries, e)
		case e.Kind == Dir && l.Entries[i].Kind != Dir:
			// A file and a directory of the same name on different pages:
			// the directory wins, in place so indices stay stable.
			l.Entries[i] = e
		}
	}
}
