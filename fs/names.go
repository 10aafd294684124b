package fs

import (
	"strings"
)

// maxNameLen is NAME_MAX on Linux: the kernel refuses longer components.
const maxNameLen = 255

// validName reports whether one path component taken from an object name
// can be shown as a POSIX directory entry. Object names may contain things
// a file system cannot: an empty component ("a//b"), "." or ".." (which
// would let a listing escape its directory), NUL, or a component longer
// than NAME_MAX. Such names are hidden from listings and lookups, never
// mangled: a mangled name could collide with a real one.
func validName(name string) bool {
	switch {
	case name == "", name == ".", name == "..":
		return false
	case len(name) > maxNameLen:
		return false
	case strings.ContainsRune(name, 0), strings.ContainsRune(name, '/'):
		return false
	}
	return true
}

// childPath joins a directory's object prefix (without its trailing slash;
// "" for the root) and a validated component into the child's object name.
func childPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// dirPrefix is the listing prefix of the directory whose path is dir.
func dirPrefix(dir string) string {
	if dir == "" {
		return ""
	}
	return dir + "/"
}

// splitPath splits a non-root path into its parent directory path and its
// last component.
func splitPath(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}
