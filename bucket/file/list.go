package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"ferry/bucket"
)

// List implements bucket.Bucket for the delimiters "/" (one directory) and
// "" (the whole tree under the prefix). A sub-directory is a prefix even
// when it is empty. The continuation token is the last name or prefix
// returned.
//
// A directory is read and sorted once per listing, not once per page: the
// pages after the first take its sorted entries from a snapshot kept
// while the directory's modification time stays the same (dirSnap), so a
// flat directory of n names lists in O(n log n).
func (b *Bucket) List(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	if err := ctxErr(ctx, "list", req.Prefix); err != nil {
		return nil, err
	}
	if req.Delimiter != "" && req.Delimiter != "/" {
		return nil, fmt.Errorf("file: list %q: delimiter %q: only \"/\" and \"\" are supported: %w",
			req.Prefix, req.Delimiter, bucket.ErrInvalid)
	}
	if req.MaxResults < 0 {
		return nil, fmt.Errorf("file: list %q: MaxResults %d: %w", req.Prefix, req.MaxResults, bucket.ErrInvalid)
	}
	limit := req.MaxResults
	if limit == 0 || limit > DefaultMaxResults {
		limit = DefaultMaxResults
	}
	// The prefix splits into a directory and the start of names in it.
	dir, partial := "", req.Prefix
	if i := strings.LastIndexByte(req.Prefix, '/'); i >= 0 {
		dir, partial = req.Prefix[:i+1], req.Prefix[i+1:]
		if err := checkName(dir, true); err != nil {
			return nil, fmt.Errorf("file: list: %w", err)
		}
	}
	l := &bucket.Listing{Objects: []bucket.Object{}, Prefixes: []string{}}
	if isTemp(dir) {
		return l, nil
	}
	w := &walker{
		ctx:     ctx,
		b:       b,
		token:   req.ContinuationToken,
		limit:   limit,
		listing: l,
		flat:    req.Delimiter == "",
	}
	if err := w.dir(dir, partial); err != nil {
		if errors.Is(err, bucket.ErrNotFound) {
			// A prefix with nothing under it is an empty listing.
			return &bucket.Listing{Objects: []bucket.Object{}, Prefixes: []string{}}, nil
		}
		return nil, err
	}
	return l, nil
}

// walker produces one page of a listing in lexical order of names.
type walker struct {
	ctx     context.Context
	b       *Bucket
	token   string
	limit   int
	listing *bucket.Listing
	flat    bool
	last    string // the last entry added
	full    bool   // the page is full and another entry exists
}

// entry is one listable name of a directory.
type entry struct {
	rel string // the name, with "/" after a directory's: the key after the directory's prefix
	// link is the path under the root of what a symbolic link names; ""
	// for a name that is no link (its path is the directory's and rel).
	link  string
	isDir bool
	// marker: the entry is the directory being listed, which holds nothing
	// listable (see walker.dir); rel is "".
	marker bool
}

// dir lists directory dir ("" for the root, else ending in "/"), keeping
// the entries whose name starts with partial. It stops when the page is
// full.
func (w *walker) dir(dir, partial string) error {
	if err := ctxErr(w.ctx, "list", dir); err != nil {
		return err
	}
	real, dirInfo, dirs, err := w.b.resolve(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return mapErr(w.ctx, "list", dir, err)
	}
	if !dirInfo.IsDir() {
		return notFound("list", dir, "not a directory")
	}
	key := snapKey{real: real, partial: partial}
	entries, err := w.sorted(key, dir, dirInfo, dirs)
	if err != nil {
		return err
	}
	for i := w.start(dir, entries); i < len(entries); i++ {
		e := entries[i]
		k := dir + e.rel
		if e.isDir && w.flat {
			if err := w.dir(k, ""); err != nil {
				if errors.Is(err, bucket.ErrNotFound) {
					continue // removed while listing
				}
				return err
			}
			if w.full {
				return nil
			}
			continue
		}
		if len(w.listing.Objects)+len(w.listing.Prefixes) == w.limit {
			w.full = true
			w.listing.ContinuationToken = w.last
			return nil
		}
		switch {
		case e.marker:
			w.listing.Objects = append(w.listing.Objects, bucket.Object{
				Name: k, Version: version(dirInfo), Updated: dirInfo.ModTime(),
			})
		case e.isDir:
			w.listing.Prefixes = append(w.listing.Prefixes, k)
		default:
			p := e.link
			if p == "" {
				p = path.Join(real, e.rel)
			}
			fi, err := w.b.root.Lstat(p)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue // removed while listing
				}
				return mapErr(w.ctx, "list", k, err)
			}
			if !fi.Mode().IsRegular() {
				continue
			}
			w.listing.Objects = append(w.listing.Objects, *toObject(k, fi))
		}
		w.last = k
	}
	w.b.dropSnap(key) // listed to its end
	return nil
}

// start is the index of the first of dir's sorted entries the page
// holds: the first after the token, or, in flat mode, the directory the
// token is inside (nothing sorts between "a/" and the names under it). A
// directory the token is not under sorts wholly after it (those before
// it are skipped, in flat mode).
func (w *walker) start(dir string, entries []entry) int {
	if w.token == "" || !strings.HasPrefix(w.token, dir) {
		return 0
	}
	after := w.token[len(dir):]
	i, found := slices.BinarySearchFunc(entries, after, func(e entry, t string) int { return strings.Compare(e.rel, t) })
	if found {
		return i + 1 // the token itself was returned
	}
	if w.flat && i > 0 && entries[i-1].isDir && strings.HasPrefix(after, entries[i-1].rel) {
		return i - 1
	}
	return i
}

// sorted returns the listable entries of dir (see entries), sorted by
// key, from the snapshot of an unchanged directory when the listing is
// past its first page, else read now (and kept for the next pages).
func (w *walker) sorted(key snapKey, dir string, dirInfo fs.FileInfo, dirs []string) ([]entry, error) {
	mtime := dirInfo.ModTime()
	if w.token != "" {
		if entries, ok := w.b.snap(key, mtime); ok {
			return entries, nil
		}
	}
	f, err := w.b.root.OpenFile(orRoot(key.real), os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, mapErr(w.ctx, "list", dir, err)
	}
	des, err := w.b.readDir(f, key.real)
	f.Close()
	w.b.dirReads.Add(1)
	if err != nil {
		return nil, mapErr(w.ctx, "list", dir, err)
	}
	entries, err := w.entries(dir, key.real, key.partial, des, dirs)
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 && key.partial == "" && dir != "" {
		// A directory with nothing listable in it is shown as the stores
		// show a folder made in their consoles: a zero-size marker
		// object named like the prefix. Without it the parent would list
		// the directory while a lookup of it (a listing of its prefix)
		// found nothing there.
		entries = append(entries, entry{marker: true})
	}
	// Sorting by key ("a/" for a directory) gives the store's byte order:
	// "a-b" < "a/x" < "a0".
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.rel, b.rel) })
	if len(entries) > snapMinEntries {
		w.b.keepSnap(key, entries, mtime)
	}
	return entries, nil
}

// entries are the entries of directory dir (real: its path under the
// root; dirs: see resolve) whose names start with partial that are
// objects or prefixes: regular files and directories, directly or through
// symbolic links. Links that are hidden are counted; devices, sockets and
// FIFOs are not objects.
func (w *walker) entries(dir, real, partial string, des []dirent, dirs []string) ([]entry, error) {
	out := make([]entry, 0, len(des))
	for _, de := range des {
		n := de.name
		if !strings.HasPrefix(n, partial) || strings.HasPrefix(n, tempPrefix) {
			continue
		}
		link, t := "", de.typ
		if t&fs.ModeSymlink != 0 {
			r := resolver{b: w.b}
			target, fi, err := r.step(real, n)
			if err == nil && fi.IsDir() && slices.Contains(dirs, target) {
				// A link to a directory above it: the tree would be endless.
				err = &linkError{link: path.Join(real, n), why: errLoop}
			}
			if err != nil {
				w.b.noteHiddenLink(err)
				var le *linkError
				if errors.As(err, &le) || errors.Is(err, fs.ErrNotExist) {
					continue // hidden, or removed while listing
				}
				return nil, mapErr(w.ctx, "list", dir+n, err)
			}
			link, t = target, fi.Mode().Type()
		}
		switch {
		case t.IsDir():
			out = append(out, entry{rel: n + "/", isDir: true})
		case t.IsRegular():
			out = append(out, entry{rel: n, link: link})
		}
	}
	return out, nil
}

// dirSnap is a directory's sorted entries kept between the pages of its
// listing. The directory's modification time tells whether it changed
// since (a name added, removed or renamed); the objects' sizes and times
// are read anew for every page.
type dirSnap struct {
	entries []entry
	mtime   time.Time
	used    time.Time
}

type snapKey struct{ real, partial string }

const (
	// snapMinEntries: a directory that fits in a page or two is read
	// again rather than kept.
	snapMinEntries = 2 * DefaultMaxResults
	// maxSnaps bounds the directories kept: listings in progress at once.
	maxSnaps = 8
	// snapIdle drops a snapshot whose listing stopped half-way.
	snapIdle = time.Minute
)

// snap returns the snapshot of key if the directory's modification time
// is still mtime.
func (b *Bucket) snap(key snapKey, mtime time.Time) ([]entry, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.snaps[key]
	if !ok || !s.mtime.Equal(mtime) {
		return nil, false
	}
	s.used = time.Now()
	return s.entries, true
}

// keepSnap keeps entries for the next pages of key's listing, dropping
// snapshots idle for snapIdle, and the least recently used past maxSnaps.
func (b *Bucket) keepSnap(key snapKey, entries []entry, mtime time.Time) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.snaps == nil {
		b.snaps = make(map[snapKey]*dirSnap)
	}
	for k, s := range b.snaps {
		if now.Sub(s.used) > snapIdle {
			delete(b.snaps, k)
		}
	}
	if _, ok := b.snaps[key]; !ok && len(b.snaps) >= maxSnaps {
		var oldest snapKey
		first := true
		for k, s := range b.snaps {
			if first || s.used.Before(b.snaps[oldest].used) {
				oldest, first = k, false
			}
		}
		delete(b.snaps, oldest)
	}
	b.snaps[key] = &dirSnap{entries: entries, mtime: mtime, used: now}
}

// dropSnap forgets key's snapshot: its listing has reached the end.
func (b *Bucket) dropSnap(key snapKey) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.snaps, key)
}
