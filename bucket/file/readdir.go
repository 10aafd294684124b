package file

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"syscall"
	"unsafe"
)

// dirent is one name of a directory and its type as the directory gives
// it.
type dirent struct {
	name string
	typ  fs.FileMode
}

// readDir returns the names in the directory f (opened through the root)
// with their types from the directory itself. os.File.ReadDir does not
// do that for a file opened in an os.Root: it stats every name, which
// made the first page of a directory of a million files cost a million
// lstat calls (17 s on a cold inode cache, where the names take 0.5 s).
// A name whose type the file system does not give (DT_UNKNOWN) is
// stat'ed through the root; real is f's path under it.
func (b *Bucket) readDir(f *os.File, real string) ([]dirent, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var out []dirent
	buf := make([]byte, 64<<10)
	for {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.ReadDirent(int(fd), buf)
			return rerr != syscall.EAGAIN
		}); err != nil {
			return nil, err
		}
		if rerr != nil {
			return nil, &os.PathError{Op: "readdirent", Path: f.Name(), Err: rerr}
		}
		if n <= 0 {
			break
		}
		if out, err = parseDirents(buf[:n], out); err != nil {
			return nil, fmt.Errorf("readdirent %s: %w", f.Name(), err)
		}
	}
	for i := range out {
		if out[i].typ != fs.ModeIrregular {
			continue
		}
		fi, err := b.root.Lstat(path.Join(orRoot(real), out[i].name))
		if err != nil {
			out[i].typ = fs.ModeIrregular // removed since: listed as neither
			continue
		}
		out[i].typ = fi.Mode().Type()
	}
	return out, nil
}

// parseDirents appends the entries of buf, a run of linux_dirent64
// records, to out, less "." and "..". A type the record does not give is
// fs.ModeIrregular, for readDir to stat.
func parseDirents(buf []byte, out []dirent) ([]dirent, error) {
	const nameOff = int(unsafe.Offsetof(syscall.Dirent{}.Name))
	for len(buf) > 0 {
		if len(buf) < nameOff {
			return out, fmt.Errorf("a record of %d bytes", len(buf))
		}
		reclen := int(*(*uint16)(unsafe.Pointer(&buf[unsafe.Offsetof(syscall.Dirent{}.Reclen)])))
		if reclen < nameOff || reclen > len(buf) {
			return out, fmt.Errorf("a record of length %d in %d bytes", reclen, len(buf))
		}
		rec := buf[:reclen]
		buf = buf[reclen:]
		name := rec[nameOff:]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		if s := string(name); s != "." && s != ".." {
			out = append(out, dirent{name: s, typ: direntType(rec[unsafe.Offsetof(syscall.Dirent{}.Type)])})
		}
	}
	return out, nil
}

// direntType is the file mode type of a d_type; fs.ModeIrregular for
// DT_UNKNOWN.
func direntType(t byte) fs.FileMode {
	switch t {
	case syscall.DT_REG:
		return 0
	case syscall.DT_DIR:
		return fs.ModeDir
	case syscall.DT_LNK:
		return fs.ModeSymlink
	case syscall.DT_FIFO:
		return fs.ModeNamedPipe
	case syscall.DT_SOCK:
		return fs.ModeSocket
	case syscall.DT_CHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case syscall.DT_BLK:
		return fs.ModeDevice
	}
	return fs.ModeIrregular
}
