package filecache

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// bootHooks are hooks for a machine whose boot ID is boot.
func bootHooks(boot string) hooks { return hooks{bootID: func() string { return boot }} }

// checkedByReads caches o whole in s and checks it by reading every block
// through the store (CheckAsRead), as a first epoch through ferry does.
func checkedByReads(t *testing.T, s *Store, o Key) {
	t.Helper()
	n := numBlocks(o.Size, testBS)
	require.EqualValues(t, n, s.WriteBlocks(o, 0, blocksData(o, 0, n, testBS)))
	assert.False(t, checkAsRead(t, s, o))
	for i := range n {
		require.True(t, readOK(t, s, o, i))
	}
	require.True(t, isChecked(t, s, o))
}

// reopen closes s and opens its cache again with h, as a new process.
func reopen(t *testing.T, s *Store, h hooks) *Store {
	t.Helper()
	require.NoError(t, s.Close())
	return openT(t, Config{Dir: s.root}, h)
}

// A file checked by one process is checked for the next in the same boot:
// whole and trusted at once, with nothing read (no read check, no bytes
// checked, no hit), and its bytes the object's. Also after the entry was
// cooled and warmed again within a process.
func TestCheckedAcrossRestart(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, bootHooks("boot-1"))
	o := obj("o", 5*testBS+7)
	checkedByReads(t, s, o)
	assert.EqualValues(t, 1, s.Stats().ReadChecks)

	s = reopen(t, s, bootHooks("boot-1"))
	assert.True(t, isChecked(t, s, o))
	assert.True(t, wholeOK(t, s, o))
	st := s.Stats()
	assert.Zero(t, st.ReadChecks)
	assert.Zero(t, st.WholeChecks)
	assert.Zero(t, st.WholeCheckedBytes)
	assert.Zero(t, st.HitBytes)
	s.checkInvariants(t)

	// Cooled (its record back in the index alone) and warmed again.
	s = reopen(t, s, hooks{bootID: func() string { return "boot-1" }, maxWarm: 1})
	o2 := obj("o2", 2*testBS)
	require.Equal(t, 2, s.WriteBlocks(o2, 0, blocksData(o2, 0, 2, testBS)))
	assert.True(t, isChecked(t, s, o))
	require.True(t, readOK(t, s, o2, 0)) // o least recent
	require.NoError(t, s.flush())
	require.EqualValues(t, 1, s.Stats().Cooled)
	assert.True(t, isChecked(t, s, o))
	assert.Zero(t, s.Stats().ReadChecks+s.Stats().WholeChecks)
}

// A check by Check (the file read whole at an open) is kept too.
func TestCheckedAcrossRestartByWholeCheck(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, bootHooks("boot-1"))
	o := obj("o", 3*testBS)
	require.Equal(t, 3, s.WriteBlocks(o, 0, blocksData(o, 0, 3, testBS)))
	require.True(t, wholeOK(t, s, o))
	require.EqualValues(t, 1, s.Stats().WholeChecks)
	s = reopen(t, s, bootHooks("boot-1"))
	assert.True(t, isChecked(t, s, o))
	assert.True(t, wholeOK(t, s, o))
	assert.Zero(t, s.Stats().WholeChecks)
}

// After a reboot, or with no boot ID to tell, nothing checked before is
// trusted: the file is checked again (here by Check, reading it whole).
func TestCheckedNotAcrossReboot(t *testing.T) {
	for _, boot := range []string{"boot-2", ""} {
		t.Run("boot="+boot, func(t *testing.T) {
			s := openT(t, Config{Dir: t.TempDir()}, bootHooks("boot-1"))
			o := obj("o", 5*testBS+7)
			checkedByReads(t, s, o)
			s = reopen(t, s, bootHooks(boot))
			assert.False(t, isChecked(t, s, o))
			assert.True(t, wholeOK(t, s, o))
			assert.EqualValues(t, 1, s.Stats().WholeChecks)
			assert.EqualValues(t, o.Size, s.Stats().WholeCheckedBytes)
		})
	}
}

// Without a boot ID the store keeps no check across processes: it writes
// no row, and the next process, even one that knows its boot, checks
// again.
func TestCheckedNoBootIDWritesNothing(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, bootHooks(""))
	o := obj("o", 2*testBS)
	checkedByReads(t, s, o)
	require.NoError(t, s.Close())
	assert.Empty(t, indexRows(t, s.root, tagChecked))
	s = openT(t, Config{Dir: s.root}, bootHooks(""))
	assert.False(t, isChecked(t, s, o))
}

// A data file changed between two processes of the same boot is checked
// again: a write (here of the same byte back, so that only the stamp
// tells), its times set back to what they were (utimes moves the ctime),
// a chmod, a truncation.
func TestCheckedAcrossRestartFileChanged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, path string)
	}{
		{"write", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			defer f.Close()
			b := make([]byte, 1)
			_, err = f.ReadAt(b, testBS+3)
			require.NoError(t, err)
			_, err = f.WriteAt(b, testBS+3)
			require.NoError(t, err)
		}},
		{"utimes", func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			require.NoError(t, err)
			require.NoError(t, os.Chtimes(path, fi.ModTime(), fi.ModTime()))
		}},
		{"chmod", func(t *testing.T, path string) { require.NoError(t, os.Chmod(path, 0o640)) }},
		{"truncate", func(t *testing.T, path string) { require.NoError(t, os.Truncate(path, testBS)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openT(t, Config{Dir: t.TempDir()}, bootHooks("boot-1"))
			o := obj("o", 5*testBS+7)
			checkedByReads(t, s, o)
			path := s.pathFor(s.keyFor(o))
			require.NoError(t, s.Close())
			time.Sleep(20 * time.Millisecond) // a ctime tick on kernels before 6.13
			tc.change(t, path)

			s = openT(t, Config{Dir: s.root}, bootHooks("boot-1"))
			assert.False(t, isChecked(t, s, o))
			if tc.name == "truncate" {
				// Its lost blocks are found, and dropped, by the check.
				assert.False(t, wholeOK(t, s, o))
				assert.Positive(t, s.Stats().CorruptBlocks)
				return
			}
			assert.True(t, wholeOK(t, s, o))
			assert.EqualValues(t, 1, s.Stats().WholeChecks)
		})
	}
}

// A byte of the data file changed between two processes is found by the
// check the changed stamp calls for: dropped, never handed out.
func TestCheckedAcrossRestartCorruptByte(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, bootHooks("boot-1"))
	o := obj("o", 5*testBS+7)
	checkedByReads(t, s, o)
	require.NoError(t, s.Close())
	time.Sleep(20 * time.Millisecond)
	corruptAt(t, s, o, 2*testBS+9)
	s = openT(t, Config{Dir: s.root}, bootHooks("boot-1"))
	assert.False(t, isChecked(t, s, o))
	assert.False(t, wholeOK(t, s, o))
	assert.EqualValues(t, 1, s.Stats().CorruptBlocks)
	assert.False(t, readOK(t, s, o, 2), "dropped")
}

// Rows that are not a check of this file in this boot count as none: no
// row (an index written before the rows), a damaged one, one of another
// format, one cut short, one of another stamp or boot, and rows of the
// first format for another size or boot. A row of the first format for
// this file in this boot is a check.
func TestCheckedRowsNotTrusted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		row     func(k []byte, st fileStamp) []byte // nil row: delete the row
		trusted bool
	}{
		{"no row", func([]byte, fileStamp) []byte { return nil }, false},
		{"damaged", func(k []byte, st fileStamp) []byte {
			v := seal(k, encodeChecked("boot-1", st))
			v[len(v)/2] ^= 1
			return v
		}, false},
		{"another format", func(k []byte, st fileStamp) []byte {
			body := encodeChecked("boot-1", st)
			body[0] = 3
			return seal(k, body)
		}, false},
		{"cut short", func(k []byte, st fileStamp) []byte {
			body := encodeChecked("boot-1", st)
			return seal(k, body[:len(body)-8])
		}, false},
		{"another stamp", func(k []byte, st fileStamp) []byte {
			st.ctime.Nsec++
			return seal(k, encodeChecked("boot-1", st))
		}, false},
		{"another boot", func(k []byte, st fileStamp) []byte {
			return seal(k, encodeChecked("boot-0", st))
		}, false},
		{"another key's", func(_ []byte, st fileStamp) []byte {
			return seal([]byte("another key"), encodeChecked("boot-1", st))
		}, false},
		{"first format", func(k []byte, st fileStamp) []byte {
			return seal(k, encodeCheckedV1("boot-1", st))
		}, true},
		{"first format, another size", func(k []byte, st fileStamp) []byte {
			st.size++
			return seal(k, encodeCheckedV1("boot-1", st))
		}, false},
		{"first format, another boot", func(k []byte, st fileStamp) []byte {
			return seal(k, encodeCheckedV1("boot-0", st))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openT(t, Config{Dir: t.TempDir()}, bootHooks("boot-1"))
			o := obj("o", 5*testBS+7)
			checkedByReads(t, s, o)
			require.NoError(t, s.Close())
			key := rowKey(entryRow(t, s.root, s.keyFor(o)), tagChecked)
			f, err := os.Open(s.pathFor(s.keyFor(o)))
			require.NoError(t, err)
			st, err := stampOf(f)
			require.NoError(t, f.Close())
			require.NoError(t, err)
			editIndex(t, s.root, func(tx *bolt.Tx) error {
				kb := tx.Bucket(rowsBucket)
				require.NotNil(t, kb.Get(key))
				if v := tc.row(key, st); v != nil {
					return kb.Put(key, v)
				}
				return kb.Delete(key)
			})
			s = openT(t, Config{Dir: s.root}, bootHooks("boot-1"))
			assert.Equal(t, tc.trusted, isChecked(t, s, o))
			assert.True(t, wholeOK(t, s, o))
			checks := 1
			if tc.trusted {
				checks = 0
			}
			assert.EqualValues(t, checks, s.Stats().WholeChecks)
		})
	}
}

// encodeCheckedV1 is a checked row of the first format, as an older ferry
// wrote it, without its seal.
func encodeCheckedV1(boot string, st fileStamp) []byte {
	buf := []byte{checkedV1}
	buf = binary.AppendUvarint(buf, uint64(len(boot)))
	buf = append(buf, boot...)
	for _, x := range []uint64{st.dev, st.ino, uint64(st.size),
		uint64(st.mtime.Sec), uint64(st.mtime.Nsec), uint64(st.ctime.Sec), uint64(st.ctime.Nsec)} {
		buf = binary.LittleEndian.AppendUint64(buf, x)
	}
	return buf
}

// A check commits one small row: not the entry's record, not its chunks.
// A block dropped deletes it.
func TestCheckedCommitsOneRow(t *testing.T) {
	var log putLog
	h := bootHooks("boot-1")
	h.indexPut = log.hook
	taken := func() (rows []string) { // key, then the value's length
		for _, p := range log.take() {
			rows = append(rows, fmt.Sprintf("%s %d", p.key, len(p.val)))
		}
		return rows
	}
	s := openT(t, Config{Dir: t.TempDir()}, h)
	o := obj("o", 2*chunkBlocks*testBS) // two chunks
	n := numBlocks(o.Size, testBS)
	require.EqualValues(t, n, s.WriteBlocks(o, 0, blocksData(o, 0, n, testBS)))
	require.NoError(t, s.flush())
	taken()

	assert.False(t, checkAsRead(t, s, o))
	p, ok := make([]byte, n*testBS), make([]bool, n)
	require.EqualValues(t, n, s.ReadBlocks(o, 0, p, ok))
	require.True(t, isChecked(t, s, o))
	require.NoError(t, s.flush())
	// The checked row, next to the entry's (the access time's row was
	// written within the hour: atimeGrain).
	s.mu.Lock()
	key := rowKey(s.byObj[o].row, tagChecked)
	s.mu.Unlock()
	assert.Equal(t, []string{
		fmt.Sprintf("%s %d", key, len(encodeChecked("boot-1", fileStamp{}))+4),
	}, taken())

	// A block dropped: the row goes at the next commit.
	time.Sleep(20 * time.Millisecond)
	corruptAt(t, s, o, 7*testBS)
	assert.False(t, readOK(t, s, o, 7))
	require.NoError(t, s.flush())
	require.NoError(t, s.Close())
	assert.Empty(t, indexRows(t, s.root, tagChecked))
}

// An index written again from memory (a commit met damage) keeps the
// checks memory holds.
func TestCheckedKeptByARebuiltIndex(t *testing.T) {
	var arm atomic.Bool
	h := bootHooks("boot-1")
	h.inCommit = func() {
		if arm.CompareAndSwap(true, false) {
			panic("page 9 already freed")
		}
	}
	s := openT(t, Config{Dir: t.TempDir()}, h)
	o := obj("o", 5*testBS+7)
	checkedByReads(t, s, o)
	require.NoError(t, s.flush())
	a := obj("a", 2*testBS)
	require.Equal(t, 2, s.WriteBlocks(a, 0, blocksData(a, 0, 2, testBS)))
	arm.Store(true)
	require.NoError(t, s.flush())
	require.False(t, arm.Load(), "the commit met the damage")
	s = reopen(t, s, bootHooks("boot-1"))
	assert.True(t, isChecked(t, s, o))
	assert.True(t, wholeOK(t, s, o))
	assert.Zero(t, s.Stats().WholeChecks)
}
