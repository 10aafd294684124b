package readahead

import (
	"fmt"
	"hash/crc32"
)

// End-to-end checksums. The disk cache checks every block against the
// CRC32C computed when it arrived, which says nothing of a body corrupted
// on the way (plain-http, a misbehaving cache tier, bad RAM or NIC): such
// bytes would be cached with a valid block CRC and served every epoch.
// Where a part holds a whole object and the store gives the object's
// CRC32C (GCS always does), the part is checked against it before anyone
// sees its bytes; a mismatch is fetched again, once, and a second one
// fails the read (ErrChecksum, EIO for the reader).

// checked reports whether p is compared with its object's CRC32C: it
// holds the whole object, and the store gave the checksum.
func checked(p *part) bool {
	return p.obj.HasCRC32C && p.start == 0 && p.end == int64(p.obj.Size)
}

// downloadChecked downloads p (within the connection budget) and, if p
// is checked, compares its bytes with the object's CRC32C, downloading
// once more on a mismatch.
func (f *Fetcher) downloadChecked(p *part) (buf []byte, crcs []uint32, err error) {
	for attempt := 0; ; attempt++ {
		if err = f.conns.acquire(p.ctx, !p.spec, &p.urgent); err != nil {
			return nil, nil, err
		}
		buf, crcs, err = f.download(p)
		f.conns.release()
		if err != nil || !checked(p) {
			return buf, crcs, err
		}
		got := crc32.Checksum(buf, castagnoli)
		if got == p.obj.CRC32C {
			return buf, crcs, nil
		}
		f.stats.checksumMismatches.Add(1)
		err = fmt.Errorf("readahead: read %q: its bytes' CRC32C is %08x, the store's %08x: %w",
			p.obj.Name, got, p.obj.CRC32C, ErrChecksum)
		f.log.Warn("a body's checksum does not match the store's", "object", p.obj.Name, "attempt", attempt+1, "err", err)
		if attempt == 1 {
			return buf, nil, err
		}
		f.pool.put(buf)
	}
}
