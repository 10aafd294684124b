package metadata

import (
	"math"
	"slices"
	"strings"
	"time"

	"ferry/bucket"
)

// Listing is a complete listing of one directory, cached: its entries in
// listing order (names sorted, a directory in place of a file of the
// same name). It never changes once made; a newer listing replaces it.
//
// It is packed: one string holds every name and version, and an entry is
// 32 bytes besides them (about 80 bytes a name for ImageNet's), where a
// DirEntry with its own strings, plus a map from names, costs about 250.
// A directory of a million names is kept in 80 MB, not 250.
type Listing struct {
	dir    string        // the directory, "" for the root
	text   string        // each entry's name then its version
	ents   []packedEntry // in listing order
	byName []uint32      // indices into ents, sorted by name
	seq    uint64        // when the listing's first page was asked for
	exp    expiry
	at     time.Time // when it was cached: its "no such name" answers follow the negative TTL from then
}

// packedEntry is one DirEntry without its strings; Seq is the listing's.
type packedEntry struct {
	off     uint32 // the name's start in text; the version follows the name
	nameLen uint16
	verLen  uint16
	kind    Kind
	hasCRC  bool
	crc     uint32
	size    uint64
	updated int64 // Unix nanoseconds; noTime for the zero time
}

// noTime stands for the zero time.Time, which has no Unix nanoseconds.
const noTime = math.MinInt64

// listingOverhead is what a Listing costs besides its entries and text.
const listingOverhead = 160

// packedSize is the bytes one entry costs besides its text: the packed
// entry and its place in byName.
const packedSize = 36

// newListing packs entries (listing order, names unique) of dir, all from
// a listing begun at seq. It returns false when a name or version is too
// long to pack (names are at most 1,024 bytes on GCS and S3).
func newListing(dir string, entries []DirEntry, seq uint64) (*Listing, bool) {
	var b strings.Builder
	n := 0
	for i := range entries {
		n += len(entries[i].Name) + len(entries[i].Obj.Version)
	}
	if n > math.MaxUint32 {
		return nil, false
	}
	b.Grow(n)
	l := &Listing{dir: dir, ents: make([]packedEntry, len(entries)), byName: make([]uint32, len(entries)), seq: seq}
	for i := range entries {
		e := &entries[i]
		if len(e.Name) > math.MaxUint16 || len(e.Obj.Version) > math.MaxUint16 {
			return nil, false
		}
		p := packedEntry{
			off: uint32(b.Len()), nameLen: uint16(len(e.Name)), verLen: uint16(len(e.Obj.Version)),
			kind: e.Kind, hasCRC: e.Obj.HasCRC32C, crc: e.Obj.CRC32C, size: e.Obj.Size, updated: noTime,
		}
		if !e.Obj.Updated.IsZero() {
			p.updated = e.Obj.Updated.UnixNano()
		}
		b.WriteString(e.Name)
		b.WriteString(e.Obj.Version)
		l.ents[i] = p
		l.byName[i] = uint32(i)
	}
	l.text = b.String()
	slices.SortFunc(l.byName, func(a, b uint32) int { return strings.Compare(l.Name(int(a)), l.Name(int(b))) })
	return l, true
}

// Len is the number of entries.
func (l *Listing) Len() int { return len(l.ents) }

// Name returns entry i's name.
func (l *Listing) Name(i int) string {
	p := &l.ents[i]
	return l.text[p.off : p.off+uint32(p.nameLen)]
}

// IsFile reports whether entry i is a file.
func (l *Listing) IsFile(i int) bool { return l.ents[i].kind == File }

// Entry returns entry i: its name, its object (for a file) and whether
// it is a file.
func (l *Listing) Entry(i int) (name string, obj bucket.Object, file bool) {
	e := l.At(i)
	return e.Name, e.Obj, e.Kind == File
}

// At returns entry i as a DirEntry.
func (l *Listing) At(i int) DirEntry {
	p := &l.ents[i]
	name := l.Name(i)
	e := DirEntry{Name: name, Entry: Entry{Kind: p.kind, Seq: l.seq}}
	if p.kind != File {
		return e
	}
	// The object's name and version are copied out of the listing's
	// text, in one allocation: an inode or a handle keeps its object for
	// as long as the kernel holds the name, and a substring would keep
	// the whole listing, and every later copy of it, alive with it.
	v := p.off + uint32(p.nameLen)
	var b strings.Builder
	b.Grow(len(l.dir) + 1 + len(name) + int(p.verLen))
	if l.dir != "" {
		b.WriteString(l.dir)
		b.WriteByte('/')
	}
	b.WriteString(name)
	nameEnd := b.Len()
	b.WriteString(l.text[v : v+uint32(p.verLen)])
	full := b.String()
	e.Obj = bucket.Object{
		Name:      full[:nameEnd],
		Size:      p.size,
		Version:   full[nameEnd:],
		CRC32C:    p.crc,
		HasCRC32C: p.hasCRC,
	}
	if p.updated != noTime {
		e.Obj.Updated = time.Unix(0, p.updated).UTC()
	}
	return e
}

// Index returns the position of name in the listing.
func (l *Listing) Index(name string) (int, bool) {
	i, ok := slices.BinarySearchFunc(l.byName, name, func(j uint32, name string) int {
		return strings.Compare(l.Name(int(j)), name)
	})
	if !ok {
		return 0, false
	}
	return int(l.byName[i]), true
}

// answer is what the listing says about name.
func (l *Listing) answer(name string) Entry {
	if i, ok := l.Index(name); ok {
		return l.At(i).Entry
	}
	return Entry{Kind: None, Seq: l.seq}
}

// bytes is about what the listing holds in memory.
func (l *Listing) bytes() int64 {
	return listingOverhead + int64(len(l.dir)) + int64(len(l.text)) + packedSize*int64(len(l.ents))
}
