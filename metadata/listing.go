package metadata

import (
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"time"
	"unsafe"

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

// maxVersionLen is the longest version a listing packs; an object with a
// longer one (no store gives one) is hidden, as a name that cannot be a
// POSIX name is.
const maxVersionLen = math.MaxUint16

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
	var b listingBuilder
	for _, e := range entries {
		if !b.add(e) {
			return nil, false
		}
	}
	return b.finish(dir, seq), true
}

// listingBuilder packs a listing as its pages come: a directory of a
// million names costs about 110 bytes a name while it is being read (the
// packed entries, their text and an index of names), not the 250 of
// DirEntries and a map from names.
type listingBuilder struct {
	text []byte
	ents []packedEntry
	// index finds a name's entry by the name's hash; other holds the
	// few names whose hash an earlier name has.
	index map[uint64]uint32
	other map[string]uint32
	seed  maphash.Seed
}

// find returns the position of name, if added.
func (b *listingBuilder) find(name string) (int, bool) {
	if b.index == nil {
		return 0, false
	}
	if i, ok := b.index[maphash.String(b.seed, name)]; ok && b.name(int(i)) == name {
		return int(i), true
	}
	i, ok := b.other[name]
	return int(i), ok
}

// name returns entry i's name, as bytes of text (compared without a copy,
// or converted).
func (b *listingBuilder) name(i int) string {
	p := &b.ents[i]
	return string(b.text[p.off : p.off+uint32(p.nameLen)])
}

// add appends e, or, when a file of e's name is there and e is a
// directory, turns it into the directory in place, so that positions
// handed out stay what they were. It returns false when e cannot be
// packed: a version over 64 KiB, or text past 4 GiB.
func (b *listingBuilder) add(e DirEntry) bool {
	if i, ok := b.find(e.Name); ok {
		if e.Kind == Dir && b.ents[i].kind != Dir {
			b.ents[i] = packedEntry{off: b.ents[i].off, nameLen: b.ents[i].nameLen, kind: Dir, updated: noTime}
		}
		return true
	}
	if len(e.Name) > math.MaxUint16 || len(e.Obj.Version) > maxVersionLen ||
		len(b.text)+len(e.Name)+len(e.Obj.Version) > math.MaxUint32 {
		return false
	}
	p := packedEntry{
		off: uint32(len(b.text)), nameLen: uint16(len(e.Name)), verLen: uint16(len(e.Obj.Version)),
		kind: e.Kind, hasCRC: e.Obj.HasCRC32C, crc: e.Obj.CRC32C, size: e.Obj.Size, updated: noTime,
	}
	if !e.Obj.Updated.IsZero() {
		p.updated = e.Obj.Updated.UnixNano()
	}
	b.text = append(append(b.text, e.Name...), e.Obj.Version...)
	if b.index == nil {
		b.index, b.seed = make(map[uint64]uint32), maphash.MakeSeed()
	}
	i := uint32(len(b.ents))
	b.ents = append(b.ents, p)
	h := maphash.String(b.seed, e.Name)
	if _, taken := b.index[h]; taken {
		if b.other == nil {
			b.other = make(map[string]uint32)
		}
		b.other[e.Name] = i
	} else {
		b.index[h] = i
	}
	return true
}

// bytes is about what b holds in memory: its text and entries as
// allocated, and its index of names (a map slot of 16 bytes, at most
// seven eighths full, and its share of the groups' control words).
func (b *listingBuilder) bytes() int64 {
	const slot = 24
	return int64(cap(b.text)) + int64(cap(b.ents))*int64(unsafe.Sizeof(packedEntry{})) +
		slot*int64(len(b.index)) + (slot+32)*int64(len(b.other))
}

// at returns entry i as a DirEntry.
func (b *listingBuilder) at(dir string, i int, seq uint64) DirEntry {
	p := &b.ents[i]
	return p.dirEntry(dir, b.name(i), string(b.text[p.off+uint32(p.nameLen):p.off+uint32(p.nameLen)+uint32(p.verLen)]), seq)
}

// finish makes the Listing, with text and entries copied to their sizes,
// and leaves b empty.
func (b *listingBuilder) finish(dir string, seq uint64) *Listing {
	l := &Listing{dir: dir, text: string(b.text), ents: slices.Clip(slices.Clone(b.ents)), byName: make([]uint32, len(b.ents)), seq: seq}
	*b = listingBuilder{}
	for i := range l.byName {
		l.byName[i] = uint32(i)
	}
	slices.SortFunc(l.byName, func(a, b uint32) int { return strings.Compare(l.Name(int(a)), l.Name(int(b))) })
	return l
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
	v := p.off + uint32(p.nameLen)
	return p.dirEntry(l.dir, l.Name(i), l.text[v:v+uint32(p.verLen)], l.seq)
}

// dirEntry is the entry p of a listing of dir, named name, at version
// (substrings of a listing's text). Its strings are copied out, in one
// allocation: an inode or a handle keeps its object for as long as the
// kernel holds the name, and a substring would keep the whole listing,
// and every later copy of it, alive with it.
func (p *packedEntry) dirEntry(dir, name, version string, seq uint64) DirEntry {
	if p.kind != File {
		return DirEntry{Name: strings.Clone(name), Entry: Entry{Kind: p.kind, Seq: seq}}
	}
	var b strings.Builder
	b.Grow(len(dir) + 1 + len(name) + len(version))
	if dir != "" {
		b.WriteString(dir)
		b.WriteByte('/')
	}
	nameStart := b.Len()
	b.WriteString(name)
	nameEnd := b.Len()
	b.WriteString(version)
	full := b.String()
	e := DirEntry{Name: full[nameStart:nameEnd], Entry: Entry{Kind: File, Seq: seq}}
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
