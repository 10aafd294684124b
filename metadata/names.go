package metadata

import (
	"strings"
)

// MaxNameLen is NAME_MAX on Linux: the kernel refuses longer components.
const MaxNameLen = 255

// ValidName reports whether one path component taken from an object name
// can be shown as a POSIX directory entry. Object names may contain things
// a file system cannot: an empty component ("a//b"), "." or ".." (which
// would let a listing escape its directory), NUL, or a component longer
// than NAME_MAX. Such names are hidden from listings and lookups, never
// mangled: a mangled name could collide with a real one.
func ValidName(name string) bool {
	switch {
	case name == "", name == ".", name == "..":
		return false
	case len(name) > MaxNameLen:
		return false
	case strings.ContainsRune(name, 0), strings.ContainsRune(name, '/'):
		return false
	}
	return true
}

// ChildPath joins a directory's object prefix (without its trailing slash;
// "" for the root) and a validated component into the child's object name.
func ChildPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// DirPrefix is the listing prefix of the directory whose path is dir.
func DirPrefix(dir string) string {
	if dir == "" {
		return ""
	}
	return dir + "/"
}

// SplitPath splits a non-root path into its parent directory path and its
// last component.
func SplitPath(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

// Under reports whether name is p or below it; everything is under "".
func Under(name, p string) bool {
	return p == "" || name == p || strings.HasPrefix(name, p+"/")
}
