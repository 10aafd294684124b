package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Where the emulator keeps the uploaded objects.
//
// A remote store's disks and caches are not the client's. With the objects
// on the client's disk, every row (which starts with the page cache
// dropped) has the emulator read them back from that disk into page cache
// allocated on the client's machine, beside ferry's and the readers' own:
// on the paravirtualised 2-vCPU machine of 2026-12-01 the emulator took
// 6.3-8.6 CPU-seconds to serve one cold 4-stream read of 2 GiB through
// ferry, against 1.4-1.5 with the objects on tmpfs
// (docs/notes/2026-12-01-emulator-objects-in-memory.md). So by default they go to /dev/shm
// when it is a tmpfs with room for them (and, for versitygw, user extended
// attributes) and the machine has memory available for them and as much
// again, at least memBeside plus ferry's --memory-limit; else under the
// work directory. As much again: the local rows read a copy of the same
// bytes through the page cache, and the objects must not crowd it out.

// shmDir is where objects go by default when it fits.
const shmDir = "/dev/shm"

// memBeside is the least memory that must stay available beside the
// objects in /dev/shm, which cannot be reclaimed (no swap, as on most
// servers), and beside ferry's --memory-limit: ferry's process, the
// emulator, the bench's readers and the page cache the rows read through.
const memBeside = 4 << 30

// storeDirName is the directory the emulator gets under the chosen parent;
// the bench removes it before and after a run, so it is never the parent
// itself (a --store-dir of /dev/shm must not empty /dev/shm). In /dev/shm,
// shared by the whole machine, the name carries the work directory's, so
// that runs with different work directories do not remove each other's
// objects, and a run killed before it could remove its own (SIGKILL, the
// OOM killer) has them removed by the next run with its work directory.
func storeDirName(o Options, parent string) string {
	name := "ferry-benchmark-store-" + o.Store
	if parent == shmDir {
		name += "-" + workDirTag(o)
	}
	return name
}

// workDirTag names o's work directory in /dev/shm, which runs from every
// work directory share: the next run from the same one removes what a
// killed run left there.
func workDirTag(o Options) string {
	abs, err := filepath.Abs(o.WorkDir)
	if err != nil {
		abs = o.WorkDir
	}
	sum := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(sum[:4])
}

// storePlace is the choice: the directory and, for the report, where it is.
type storePlace struct {
	Dir      string
	InMemory bool   // on tmpfs: the emulator's reads take no disk or page cache
	Why      string // for the log, when the default fell back to disk
}

// hostProbe reads the machine; tests replace it.
type hostProbe struct {
	// statfs returns dir's file system type and the bytes free to us.
	statfs func(dir string) (fsType int64, avail int64, err error)
	// memAvailable is /proc/meminfo's MemAvailable, in bytes.
	memAvailable func() (int64, error)
	// userXattrs reports whether files in dir take user.* extended
	// attributes (versitygw's posix backend keeps metadata in them;
	// tmpfs has them since Linux 6.6).
	userXattrs func(dir string) error
}

var realHost = hostProbe{
	statfs: func(dir string) (int64, int64, error) {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return 0, 0, err
		}
		return int64(st.Type), int64(st.Bavail) * st.Bsize, nil
	},
	memAvailable: func() (int64, error) {
		b, err := os.ReadFile("/proc/meminfo")
		if err != nil {
			return 0, err
		}
		return parseMemAvailable(b)
	},
	userXattrs: func(dir string) error {
		f, err := os.CreateTemp(dir, ".ferry-benchmark-xattr-*")
		if err != nil {
			return err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		return unix.Fsetxattr(int(f.Fd()), "user.ferry-benchmark", []byte("1"), 0)
	},
}

// parseMemAvailable finds MemAvailable in /proc/meminfo's text.
func parseMemAvailable(meminfo []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		if f := bytes.Fields(sc.Bytes()); len(f) >= 2 && string(f[0]) == "MemAvailable:" {
			kib, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: MemAvailable %q: %w", f[1], err)
			}
			return kib << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/meminfo: no MemAvailable")
}

// storeRoom is what the objects of a dataset of files files and dataBytes
// bytes take in the emulator's directory: the objects, a metadata file or
// attributes of a few KiB each, and some slack.
func storeRoom(dataBytes int64, files int) int64 {
	return dataBytes + int64(files)*8<<10 + 64<<20
}

// chooseStoreDir picks the emulator's directory for the dataset: under
// o.StoreDir if given (which must exist), else /dev/shm if it fits (see
// above), else under o.WorkDir.
func chooseStoreDir(o Options, dataBytes int64, files int, h hostProbe) storePlace {
	if o.StoreDir != "" {
		t, _, err := h.statfs(o.StoreDir)
		return storePlace{Dir: filepath.Join(o.StoreDir, storeDirName(o, o.StoreDir)), InMemory: err == nil && t == unix.TMPFS_MAGIC}
	}
	disk := func(why string) storePlace {
		return storePlace{Dir: filepath.Join(o.WorkDir, storeDirName(o, o.WorkDir)), Why: why}
	}
	need := storeRoom(dataBytes, files)
	if why := shmRefusal(need, max(need, memBeside+max(memoryLimitOf(o.FerryArgs), 0)), "the objects", h); why != "" {
		return disk(why)
	}
	if o.Store == "s3" {
		if err := h.userXattrs(shmDir); err != nil {
			return disk(fmt.Sprintf("%s: no user extended attributes, in which versitygw keeps metadata (%v)", shmDir, err))
		}
	}
	return storePlace{Dir: filepath.Join(shmDir, storeDirName(o, shmDir)), InMemory: true}
}

// shmRefusal says why what (need bytes) cannot go in /dev/shm: it is not
// a tmpfs, has not the room, or the machine would not keep beside bytes
// of memory available beside it; "" if it can.
func shmRefusal(need, beside int64, what string, h hostProbe) string {
	t, avail, err := h.statfs(shmDir)
	switch {
	case err != nil:
		return fmt.Sprintf("%s: %v", shmDir, err)
	case t != unix.TMPFS_MAGIC:
		return shmDir + " is not a tmpfs"
	case avail < need:
		return fmt.Sprintf("%s has %d MiB free, %s need %d MiB", shmDir, avail>>20, what, need>>20)
	}
	mem, err := h.memAvailable()
	switch {
	case err != nil:
		return err.Error()
	case mem < need+beside:
		return fmt.Sprintf("%d MiB of memory available, %s need %d MiB and %d MiB more must stay free", mem>>20, what, need>>20, beside>>20)
	}
	return ""
}

// describe says where the objects are, for the report's store line.
func (p storePlace) describe() string {
	if p.InMemory {
		return "objects in memory (tmpfs " + p.Dir + ")"
	}
	return "objects on disk (" + p.Dir + ")"
}
