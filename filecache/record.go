package filecache

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// Index records, format 2. An entry's bitmap and CRCs are cut into chunks
// of chunkBlocks blocks, so that a commit writes only the chunks that
// changed since the last one, and copies only those under the store's
// lock. (Format 1 kept them whole in the entry: a 64 GiB object's 4 MiB of
// CRCs was encoded and written at every commit, whatever was read.)
//
//	ROW 'e'            2, name, version, size, block size, chunk 0, seal
//	ROW 'k' BE32(i)    chunk i, for i >= 1, seal
//
// A chunk is the bitmap words of its blocks, then their CRCs, little
// endian. A chunk with no block present is not stored: a missing chunk
// means none of its blocks is present, so a new entry of any size costs
// one small record. Every value ends with a seal, the CRC32C of its key
// and value: a damaged header loses its entry, a damaged chunk only its
// blocks (and a chunk that landed under another key is damaged).
//
// Format 1 (entry: 1, name, version, size, block size, allocated bytes,
// the whole bitmap, every CRC; no seal) is still read: Open loads it and
// its first commit writes the entry again in format 2.
const (
	recordV1 = 1
	recordV2 = 2

	// chunkBlocks is 256 blocks (16 MiB of object at the default block
	// size): a chunk is 32 bytes of bitmap and 1 KiB of CRCs, about one
	// bbolt page with its key. bbolt rewrites whole pages, so smaller
	// chunks would not make a commit after a random read cheaper, and
	// larger ones would make it dearer; a sequential GiB dirties 64.
	// A multiple of 64: a chunk's bitmap is whole words.
	chunkBlocks = 256
)

// record is the persistent part of an entry.
type record struct {
	format        byte // recordV1 or recordV2, as read
	name, version string
	size          uint64
	blockSize     int64
	bytes         int64 // format 1 only, and unused: Open counts the file
	present       bitmap
	crcs          []uint32
}

var errBadRecord = errors.New("malformed index record")

// numChunks is how many chunks an object of n blocks has (an empty object
// has one, empty).
func numChunks(n int64) int64 { return max(1, (n+chunkBlocks-1)/chunkBlocks) }

// chunkSpan returns the blocks [first, limit) of chunk c of an object of n
// blocks.
func chunkSpan(n, c int64) (first, limit int64) {
	first = c * chunkBlocks
	return first, min(first+chunkBlocks, n)
}

// chunkLen is the length of chunk c encoded, without its seal.
func chunkLen(n, c int64) int {
	first, limit := chunkSpan(n, c)
	nb := max(0, limit-first)
	return int((nb+63)/64*8 + nb*4)
}

// appendChunk appends chunk c of present and crcs (n blocks) to buf.
func appendChunk(buf []byte, present bitmap, crcs []uint32, n, c int64) []byte {
	first, limit := chunkSpan(n, c)
	for _, w := range present[first/64 : (limit+63)/64] {
		buf = binary.LittleEndian.AppendUint64(buf, w)
	}
	for _, x := range crcs[first:limit] {
		buf = binary.LittleEndian.AppendUint32(buf, x)
	}
	return buf
}

// chunkEmpty reports whether no block of chunk c is present.
func chunkEmpty(present bitmap, n, c int64) bool {
	first, limit := chunkSpan(n, c)
	for _, w := range present[first/64 : (limit+63)/64] {
		if w != 0 {
			return false
		}
	}
	return true
}

// readChunk decodes v, chunk c of an object of n blocks, into present and
// crcs. On false (the wrong length, or bits past the object's end) it
// changed nothing.
func readChunk(v []byte, present bitmap, crcs []uint32, n, c int64) bool {
	first, limit := chunkSpan(n, c)
	if c < 0 || (c > 0 && first >= limit) || len(v) != chunkLen(n, c) {
		return false
	}
	words := present[first/64 : (limit+63)/64]
	// Bits past the end would break bitmap's invariant.
	if len(words) > 0 && limit%64 != 0 && binary.LittleEndian.Uint64(v[8*(len(words)-1):])>>(uint64(limit)%64) != 0 {
		return false
	}
	for i := range words {
		words[i] = binary.LittleEndian.Uint64(v[8*i:])
	}
	v = v[8*len(words):]
	for i := range crcs[first:limit] {
		crcs[first+int64(i)] = binary.LittleEndian.Uint32(v[4*i:])
	}
	return true
}

// chunkKey is the key of chunk c of the entry at row (index.go).
func chunkKey(row uint64, c int64) []byte {
	return binary.BigEndian.AppendUint32(rowKey(row, tagChunk), uint32(c))
}

// seal appends the CRC32C of key and v to v.
func seal(key, v []byte) []byte {
	sum := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, v)
	return binary.LittleEndian.AppendUint32(v, sum)
}

// unseal returns v without its seal, if the seal matches key and v.
func unseal(key, v []byte) ([]byte, bool) {
	if len(v) < 4 {
		return nil, false
	}
	body := v[:len(v)-4]
	sum := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, body)
	return body, sum == binary.LittleEndian.Uint32(v[len(v)-4:])
}

// encodeHeader encodes r's entry in format 2, with chunk 0 and without
// its seal (the commit adds it, outside the store's lock).
func encodeHeader(r *record) []byte {
	n := numBlocks(r.size, r.blockSize)
	buf := make([]byte, 0, 32+len(r.name)+len(r.version)+chunkLen(n, 0)+4)
	buf = append(buf, recordV2)
	buf = binary.AppendUvarint(buf, uint64(len(r.name)))
	buf = append(buf, r.name...)
	buf = binary.AppendUvarint(buf, uint64(len(r.version)))
	buf = append(buf, r.version...)
	buf = binary.AppendUvarint(buf, r.size)
	buf = binary.AppendUvarint(buf, uint64(r.blockSize))
	return appendChunk(buf, r.present, r.crcs, n, 0)
}

// recordReader reads a record's fields in order.
type recordReader struct {
	v  []byte
	ok bool
}

func (rr *recordReader) str() string {
	n, k := binary.Uvarint(rr.v)
	if k <= 0 || n > uint64(len(rr.v)-k) {
		rr.ok = false
		return ""
	}
	s := string(rr.v[k : k+int(n)])
	rr.v = rr.v[k+int(n):]
	return s
}

func (rr *recordReader) num() uint64 {
	n, k := binary.Uvarint(rr.v)
	if k <= 0 {
		rr.ok = false
		return 0
	}
	rr.v = rr.v[k:]
	return n
}

// decodeRecord decodes the entry stored under key: format 1 whole, format
// 2 with chunk 0 only (the caller reads the other chunks into present and
// crcs).
func decodeRecord(key, v []byte) (*record, error) {
	if len(v) < 1 || (v[0] != recordV1 && v[0] != recordV2) {
		return nil, errBadRecord
	}
	r := &record{format: v[0]}
	if r.format == recordV2 {
		var ok bool
		if v, ok = unseal(key, v); !ok {
			return nil, errBadRecord
		}
	}
	rr := &recordReader{v: v[1:], ok: true}
	r.name = rr.str()
	r.version = rr.str()
	r.size = rr.num()
	bs := rr.num()
	if r.format == recordV1 {
		r.bytes = int64(rr.num())
	}
	if !rr.ok || validateBlockSize(int64(bs)) != nil || r.bytes > 1<<62 || r.bytes < 0 {
		return nil, errBadRecord
	}
	r.blockSize = int64(bs)
	n := numBlocks(r.size, r.blockSize)
	if r.format == recordV1 {
		return r, decodeV1Blocks(r, rr.v, n)
	}
	if len(rr.v) != chunkLen(n, 0) {
		return nil, errBadRecord
	}
	r.present, r.crcs = newBitmap(n), make([]uint32, n)
	if !readChunk(rr.v, r.present, r.crcs, n, 0) {
		return nil, errBadRecord
	}
	return r, nil
}

// decodeV1Blocks decodes format 1's bitmap and CRCs, v, into r.
func decodeV1Blocks(r *record, v []byte, n int64) error {
	words := (n + 63) / 64
	if uint64(len(v)) != uint64(words)*8+uint64(n)*4 {
		return errBadRecord
	}
	r.present = make(bitmap, words)
	for i := range r.present {
		r.present[i] = binary.LittleEndian.Uint64(v[8*i:])
	}
	v = v[8*words:]
	r.crcs = make([]uint32, n)
	for i := range r.crcs {
		r.crcs[i] = binary.LittleEndian.Uint32(v[4*i:])
	}
	// Bits past the end would break bitmap's invariant.
	if n%64 != 0 && words > 0 && r.present[words-1]>>(uint64(n)%64) != 0 {
		return errBadRecord
	}
	return nil
}
