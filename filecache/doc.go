// Package filecache is ferry's persistent, range-aware cache of object
// bytes on local disk: the reason every epoch after the first runs at SSD
// speed.
//
// Callers name an object version by a Key (name, version, size, as the
// store gave them). Each gets one sparse data file, named only by the
// SHA-256 of (Config.BucketID, name, version, size), so an object name
// never becomes a path and nothing is written outside Config.Dir. The
// file is cut into fixed-size blocks; a bitmap says which blocks are
// present and a CRC32C per block is checked on every read. A bbolt index
// (Dir/v1/index.db) keeps bitmaps, CRCs, sizes and access times across
// restarts; entries are evicted whole, least recently used first, to
// stay under MaxSize and above MinFree. Where a new entry enters the LRU
// list once the cache is full is the insertion policy's (insert.go): at
// the least recent end while that would hit more than LRU, so that a
// dataset larger than the cache, read epoch after epoch, keeps a stable
// part of itself instead of evicting each file just before it is read
// again; at the most recent end, as LRU, when LRU would hit more (a new
// working set after data read once). Both are simulated on a sample of
// the objects to choose.
//
// # Memory and restarts
//
// Open reads only each entry's access time, size and row (cold.go), from
// the snapshot a clean Close wrote (snapshot.go) or else from the index:
// the entries are queued cold, at about 72 bytes each, and read from the
// index, and checked, when first used (warmed). Entries idle beyond the
// most recent 16,384 are cooled again after a commit. So a cache of 1.28M
// objects costs about 100 MB of memory rather than a record each, and a
// restart serves its first read before any record is read. Data files
// that no entry claims are removed in the background after Open returns
// (tidy.go). An index over 64 MiB is not checked whole at Open (that maps
// all of it); damage in it is found as it is read, and a commit that
// meets it writes the index again from memory, dropping cold entries.
//
// # Index format
//
// Each entry's rows are numbered: a new entry takes the next row number,
// and its rows are keyed by it and a tag (index.go), so that new entries
// are appended to the B+tree and an entry's rows lie together. An index
// of the first format, keyed by the entries' hashes, is converted once at
// Open (convert.go).
//
// An entry's bitmap and CRCs are stored in chunks of 256 blocks (record
// format 2, record.go): the entry's record holds its name, version, size,
// block size and chunk 0; chunks 1 and up are rows of their own, and one
// with no block present is not stored. A commit writes only the chunks that
// changed since the last, and copies only those under the store's lock,
// so its cost follows the blocks written, not the object's size: a block
// written to a 64 GiB object commits about 1 KiB, where the whole record
// was 4 MiB. Every value is sealed with a CRC32C of its key and bytes: a
// damaged chunk loses its blocks, a damaged record its entry, and neither
// is served. A file's last check is a row of its own (checked.go).
// Records of format 1 (one value with the whole bitmap and every CRC) are
// read as they are warmed and written again as format 2 by the next
// commit, so an upgrade keeps the cache. An older ferry does not know
// the numbered rows: it starts with an empty cache, and its data files
// are orphans to it.
//
// Layout:
//
//	Dir/v1/index.db              bbolt index
//	Dir/v1/entries.snapshot      entries in LRU order, left by a clean Close
//	Dir/v1/data/ab/abcdef...     one sparse file per object version
//
// # Durability
//
// A block is written with pwrite, and only then marked present: at once in
// memory, and durably by a batched index commit (every second, every
// flushBlocks blocks, and at Close). Whole aligned pages are written with
// O_DIRECT through a second descriptor (the bytes are in the FUSE page
// cache already; a second page-cache copy cost CPU, writeback and memory),
// an object's short last block and volumes that refuse direct I/O through
// the page cache. The data volume is flushed with one syncfs(2) at most
// every 30 seconds and at Close, not before every commit: forcing
// writeback every second made a cold epoch wait on the disk. So the index
// may durably claim a block whose bytes were still in the page cache (or
// the device's write cache) when the power went; that is what the
// per-block CRC is for: such a block fails its check, is dropped, counted
// as corrupt, and fetched again. We never fsync per block either: a
// datacenter SSD manages a few thousand fsyncs a second, far below the
// block rate of one fast network link, and a cache may lose work in a
// crash as long as it never serves wrong bytes. kill -9 loses nothing
// written (the bytes are with the kernel, on the device or in its page
// cache) and at most the last second of index updates.
//
// One process owns a Dir at a time (the index is locked); Open fails if
// Dir cannot be created or is locked, and the caller may then run without
// a disk cache. A configuration it cannot use (sizes, a Dir other users
// could change) fails with an error wrapping ErrInvalid. Entries left by
// another BucketID in a shared Dir count toward the limit and age out by
// LRU.
//
// # Files read without the store
//
// Whole hands out the data file of an object cached whole, for the kernel
// to read directly (FUSE passthrough, see fs). Those reads bypass
// ReadBlocks, so the file is checked whole before it is handed to the
// kernel: by WholeFile.Check, which reads it, or by reads through the
// store that covered it (CheckAsRead); and again whenever the file's
// stamp (device, inode, size, mtime, ctime) shows that something wrote
// to it since. The stamp of the last check is kept in the index with the
// machine's boot ID (checked.go), so a restart in the same boot trusts
// an unchanged file at once; after a reboot every file is checked again.
// The file is held until released: eviction passes it by, and one
// dropped all the same counts until then.
//
// # What it must never do
//
// Serve bytes that differ from what WriteBlocksCRC was given for that object
// version; write outside Dir; fail a read or a mount because the disk is
// full, read-only, deleted or its index corrupt (it degrades to a miss and
// logs once per kind of failure); hold its lock across disk I/O; import
// the store interface (ferry/bucket): readahead stands between the two,
// and the cache knows objects only by Key.
package filecache
