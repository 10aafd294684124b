package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"unsafe"
)

// FolioSizes is the mean size of the page-cache folios holding the first
// Bytes of a file just read, on local disk and through ferry. Filling
// fresh page-cache pages is much of a reader's cost on some machines, and
// likely paid per folio: kernel 6.18 gives FUSE files only 4 KiB pages
// while ext4 gets folios of up to 2 MiB, which would put ferry's ratios
// to local disk at a disadvantage that only the kernel can remove.
type FolioSizes struct {
	File     string `json:"file"`
	Bytes    int64  `json:"bytes"`
	LocalKiB int64  `json:"local_kib"`
	FerryKiB int64  `json:"ferry_kib"`
}

// folioStats are the page-cache pages of a file's first bytes and the
// folios they form.
type folioStats struct {
	pages, folios int64
}

// errPFNHidden: the kernel shows page frame numbers only to a process
// with CAP_SYS_ADMIN.
var errPFNHidden = errors.New("page frame numbers hidden (needs CAP_SYS_ADMIN)")

func (s folioStats) meanKiB() int64 {
	if s.folios == 0 {
		return 0
	}
	return s.pages * int64(os.Getpagesize()) / 1024 / s.folios
}

// kpfCompoundTail is the flag of /proc/kpageflags marking a page that is
// not the first of its folio (Documentation/admin-guide/mm/pagemap.rst).
const kpfCompoundTail = 1 << 16

// folioSink keeps the loads that map the pages from being optimised away.
var folioSink byte

// pageCacheFolios reads the first max bytes of path with read(2) (the
// page cache fills as any reader's would), maps them and looks each page
// up in /proc/self/pagemap and /proc/kpageflags: a folio is a page that is
// not the tail of a compound page. The range starts at offset 0 and
// page-cache folios are naturally aligned, so its first page is never a
// tail; a file shorter than max may end inside a folio, counted whole.
// Needs root (kpageflags, and pagemap's frame numbers).
func pageCacheFolios(path string, max int64) (folioStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return folioStats{}, err
	}
	defer f.Close()
	n, err := io.Copy(io.Discard, io.LimitReader(f, max))
	if err != nil {
		return folioStats{}, err
	}
	page := int64(os.Getpagesize())
	n &^= page - 1
	if n == 0 {
		return folioStats{}, fmt.Errorf("%s: smaller than a page", path)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(n), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return folioStats{}, err
	}
	defer syscall.Munmap(m)
	for i := int64(0); i < n; i += page {
		folioSink += m[i] // map the cached page (no I/O: it was just read)
	}
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return folioStats{}, err
	}
	defer pm.Close()
	kf, err := os.Open("/proc/kpageflags")
	if err != nil {
		return folioStats{}, err
	}
	defer kf.Close()
	npages := n / page
	entries := make([]byte, 8*npages)
	base := int64(uintptr(unsafe.Pointer(unsafe.SliceData(m))))
	if _, err := pm.ReadAt(entries, base/page*8); err != nil {
		return folioStats{}, fmt.Errorf("pagemap: %w", err)
	}
	var s folioStats
	var flags [8]byte
	for i := range npages {
		e := binary.LittleEndian.Uint64(entries[8*i:])
		pfn := e & (1<<55 - 1)
		switch {
		case e&(1<<63) == 0:
			return folioStats{}, fmt.Errorf("page %d of %s not in memory after reading it (reclaimed?)", i, path)
		case pfn == 0:
			return folioStats{}, errPFNHidden
		}
		if _, err := kf.ReadAt(flags[:], int64(pfn)*8); err != nil {
			return folioStats{}, fmt.Errorf("kpageflags: %w", err)
		}
		s.pages++
		if binary.LittleEndian.Uint64(flags[:])&kpfCompoundTail == 0 {
			s.folios++
		}
	}
	return s, nil
}
