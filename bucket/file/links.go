package file

// Symbolic links: followed to what they name inside the root, as the
// kernel would follow them, one component at a time, so that a name never
// leads out of the root and never round a loop. A link that would is
// hidden, counted and logged once.

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"syscall"
)

// maxLinks is how many symbolic links one name may go through, as many as
// Linux follows in one path (MAXSYMLINKS); more is a loop.
const maxLinks = 40

var (
	// errOutside: the link's target is outside the root, is an absolute
	// path elsewhere, or climbs above the root with "..", even to come
	// back into it.
	errOutside = errors.New("leads out of the source directory")
	// errLoop: following the link comes back to where it started, or
	// takes more than maxLinks links.
	errLoop = errors.New("is a loop")
	// errDangling: the link's target does not exist.
	errDangling = errors.New("points to nothing")
)

// linkError is a symbolic link that is hidden, and why.
type linkError struct {
	link string // its path under the root
	why  error  // errOutside, errLoop or errDangling
}

func (e *linkError) Error() string { return fmt.Sprintf("symbolic link %q %v", e.link, e.why) }
func (e *linkError) Unwrap() error { return e.why }

// resolver follows the symbolic links of one name.
type resolver struct {
	b     *Bucket
	links int // followed so far
}

// resolve returns what name (an object or directory name without a
// trailing "/", "" for the root) stands for: its path under the root with
// every symbolic link followed, and its FileInfo. dirs are the paths of
// the directories on the way, the root ("") first and, if name is a
// directory, name's last: a listing of name hides a link to any of them,
// which would make the tree endless. A name that passes through the same
// directory twice is such a loop. A hidden link on the way gives a
// *linkError, counted and logged here; other errors are the os's.
func (b *Bucket) resolve(name string) (real string, fi fs.FileInfo, dirs []string, err error) {
	r := resolver{b: b}
	dirs = []string{""}
	if name == "" {
		fi, err = b.root.Lstat(".")
	} else {
		comps := strings.Split(name, "/")
		for i, c := range comps {
			if real, fi, err = r.step(real, c); err != nil {
				break
			}
			if !fi.IsDir() {
				if i < len(comps)-1 {
					err = syscall.ENOTDIR
				}
				break
			}
			if slices.Contains(dirs, real) {
				err = &linkError{link: strings.Join(comps[:i+1], "/"), why: errLoop}
				break
			}
			dirs = append(dirs, real)
		}
	}
	if err != nil {
		b.noteHiddenLink(err)
		return "", nil, nil, err
	}
	return real, fi, dirs, nil
}

// step finds the entry c of directory dir (a path under the root without
// links, "" for the root), following it if it is a symbolic link.
func (r *resolver) step(dir, c string) (string, fs.FileInfo, error) {
	p := dir
	switch c {
	case "", ".":
	case "..":
		if dir == "" {
			return "", nil, errOutside
		}
		if p = path.Dir(dir); p == "." {
			p = ""
		}
	default:
		p = path.Join(dir, c)
	}
	fi, err := r.b.root.Lstat(orRoot(p))
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return p, fi, err
	}
	if r.links++; r.links > maxLinks {
		return "", nil, &linkError{link: p, why: errLoop}
	}
	target, err := r.b.root.Readlink(p)
	if err != nil {
		return "", nil, err
	}
	real, fi, err := r.follow(dir, target)
	var le *linkError
	switch {
	case errors.As(err, &le):
		return "", nil, err // the innermost link that failed
	case errors.Is(err, errOutside):
		return "", nil, &linkError{link: p, why: errOutside}
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return "", nil, &linkError{link: p, why: errDangling}
	}
	return real, fi, err
}

// follow resolves a link's target, relative to dir, where the link is.
func (r *resolver) follow(dir, target string) (string, fs.FileInfo, error) {
	if strings.HasPrefix(target, "/") {
		rest, ok := r.b.underRoot(target)
		if !ok {
			return "", nil, errOutside
		}
		dir, target = "", rest
	}
	cur := dir
	var fi fs.FileInfo
	var err error
	comps := strings.Split(target, "/") // at least one
	for i := 0; i < len(comps) && err == nil; i++ {
		if cur, fi, err = r.step(cur, comps[i]); err == nil && i < len(comps)-1 && !fi.IsDir() {
			err = syscall.ENOTDIR
		}
	}
	return cur, fi, err
}

// underRoot returns an absolute path's part under the root ("" for the
// root itself), whether it names the root as given or as it really is.
func (b *Bucket) underRoot(abs string) (string, bool) {
	abs = path.Clean(abs)
	for _, root := range []string{b.dir, b.realDir} {
		if abs == root {
			return "", true
		}
		if rest, ok := strings.CutPrefix(abs, strings.TrimSuffix(root, "/")+"/"); ok {
			return rest, true
		}
	}
	return "", false
}

// orRoot is p for os.Root, which names the root ".".
func orRoot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// noteHiddenLink counts a hidden link, and logs the first.
func (b *Bucket) noteHiddenLink(err error) {
	var le *linkError
	if !errors.As(err, &le) {
		return
	}
	b.hiddenLinks.Add(1)
	if b.hiddenLogged.CompareAndSwap(false, true) && b.log != nil {
		// Warn, once: the files are in the directory but not in the
		// mount, and at debug level nobody would learn why.
		b.log.Warn("hiding symbolic links of the source that lead out of it, point to nothing or loop (logged once; see ferry_file_hidden_links_total)",
			"example", le.link, "why", le.why.Error())
	}
}

// HiddenLinks is how many times a symbolic link was hidden from a listing
// or a lookup: one leading out of the root, pointing to nothing, or going
// round a loop.
func (b *Bucket) HiddenLinks() uint64 { return b.hiddenLinks.Load() }
