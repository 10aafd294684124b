package metadata

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"ferry/bucket"
)

// Lister reads one directory's listing page by page, as a reader of the
// directory goes further, and keeps what it read: an index handed out
// once always means the same entry. Once the last page is read the
// listing is packed (Listing) and cached (when the TTL and the memory
// limit allow). A Lister is not safe for concurrent use: its owner
// serialises NextPage and reads of its fields.
type Lister struct {
	// Path is the directory, "" for the root.
	Path string
	// Complete: every page has been read.
	Complete bool

	done    *Listing       // once complete
	b       listingBuilder // read so far, in listing order, until complete
	token   string         // continuation of the next page
	lastKey string         // greatest object name or prefix listed so far
	seq     uint64         // when the first page was asked for, 0 before
	// charged is what l holds and the memory limit counts for it (Charge):
	// what it has read, or its complete listing unless the cache keeps
	// that (and counts it). Release gives it back.
	charged int64
}

// NewLister starts a listing of dir: complete at once from a fresh cached
// listing (which it shares), else empty, to be read by NextPage.
func (c *Cache) NewLister(dir string) *Lister {
	l := &Lister{Path: dir}
	if cached, ok := c.cache.listing(dir); ok {
		l.done, l.Complete = cached, true
	}
	return l
}

// Seq orders the listing's answers against other requests' (Entry.Seq).
func (l *Lister) Seq() uint64 {
	if l.done != nil {
		return l.done.seq
	}
	return l.seq
}

// Len is the number of entries read so far.
func (l *Lister) Len() int {
	if l.done != nil {
		return l.done.Len()
	}
	return len(l.b.ents)
}

// At returns entry i, i < Len().
func (l *Lister) At(i int) DirEntry {
	if l.done != nil {
		return l.done.At(i)
	}
	return l.b.at(l.Path, i, l.seq)
}

// Settled reports whether entry i can no longer change: a file "x" may
// still turn into a directory while the listing has not reached "x/" (it
// sorts after "x.txt", "x-1" and friends, possibly pages later).
func (l *Lister) Settled(i int) bool {
	if l.Complete {
		return true
	}
	return l.b.ents[i].kind == Dir || l.lastKey >= DirPrefix(l.Path)+l.b.name(i)+"/"
}

// NextPage adds the next page of the listing to l, packed as it comes.
// Names that cannot be POSIX names are left out (and counted,
// NoteHidden), and so are objects with a version over 64 KiB.
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
	for _, e := range c.pageEntries(page, prefix, l.seq) {
		if !l.b.add(e) {
			return fmt.Errorf("list %q: over 4 GiB of names, more than ferry can hold", prefix)
		}
	}
	if n := len(page.Objects); n > 0 && page.Objects[n-1].Name > l.lastKey {
		l.lastKey = page.Objects[n-1].Name
	}
	if n := len(page.Prefixes); n > 0 && page.Prefixes[n-1] > l.lastKey {
		l.lastKey = page.Prefixes[n-1]
	}
	l.token = page.ContinuationToken
	if l.token == "" {
		l.Complete = true
		l.done = l.b.finish(l.Path, l.seq)
		if c.cache.putListing(l.done) {
			c.recharge(l, 0) // the cache counts it now
		} else {
			c.recharge(l, l.done.bytes())
		}
		return nil
	}
	c.recharge(l, l.b.bytes())
	return nil
}

// recharge counts n bytes held by l against the memory limit, in place
// of what it counted before. A directory of a million names read by one
// `ls` holds about 100 MB until its handle is closed, and more when it
// is too large to cache.
func (c *Cache) recharge(l *Lister, n int64) {
	if d := n - l.charged; d != 0 {
		l.charged = n
		c.Charge(d)
	}
}

// Release gives back the memory l was charged for; its owner calls it
// once, when done with l (fs: when the directory handle is released).
func (c *Cache) Release(l *Lister) { c.recharge(l, 0) }

// Charged is what l is counted for against the memory limit now.
func (l *Lister) Charged() int64 { return l.charged }

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
		if !ValidName(name) || len(o.Version) > maxVersionLen {
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
