// Package mountinfo reads this process's mount table,
// /proc/self/mountinfo: what is mounted where, and on top of what. The
// mount lifecycle (package daemon) asks it whether a mount point is taken
// and whether its mount is still attached; the control socket's clients
// (package control) ask it which ferry mount holds a path and who mounted
// it. It only reads: it never changes a mount.
package mountinfo

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// FerryType is the type a ferry mount shows in the mount table (a FUSE
// mount of subtype "ferry").
const FerryType = "fuse.ferry"

// Mount is one line of /proc/self/mountinfo, the parts ferry uses.
type Mount struct {
	Point  string // mount point, unescaped
	FSType string // "fuse.ferry", "tmpfs", ...
	Dev    string // "major:minor", as stat(2) of the mount's root gives it
	Owner  int    // a FUSE mount's user_id (who mounted it), else -1
}

// Table is a mount table, in mount order: of the mounts on one point, the
// last is on top.
type Table []Mount

// Read returns this process's mount table; nil if it cannot be read.
func Read() Table {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	return Parse(string(data))
}

// Parse parses the text of a mountinfo file. Lines too short to name a
// mount point are skipped.
func Parse(data string) Table {
	var t Table
	for _, line := range strings.Split(data, "\n") {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		m := Mount{Point: unescape(fields[4]), Dev: fields[2], Owner: -1}
		for i, f := range fields {
			if f == "-" && i >= 6 && i+1 < len(fields) {
				m.FSType = fields[i+1]
				if i+3 < len(fields) {
					m.Owner = userID(fields[i+3])
				}
				break
			}
		}
		t = append(t, m)
	}
	return t
}

// userID is the user_id= of a FUSE mount's super options, or -1.
func userID(superOpts string) int {
	for _, o := range strings.Split(superOpts, ",") {
		if v, ok := strings.CutPrefix(o, "user_id="); ok {
			if uid, err := strconv.Atoi(v); err == nil {
				return uid
			}
		}
	}
	return -1
}

// Top returns the topmost mount on dir; ok is false if dir is no mount
// point.
func (t Table) Top(dir string) (top Mount, ok bool) {
	for _, m := range t {
		if m.Point == dir {
			top, ok = m, true
		}
	}
	return top, ok
}

// Holding returns the mount that holds path: the deepest mount point at
// or above it, the topmost of those on that point. path must be absolute
// and clean. ok is false only for a table without "/".
func (t Table) Holding(path string) (holder Mount, ok bool) {
	for _, m := range t {
		if !(path == m.Point || m.Point == "/" || strings.HasPrefix(path, m.Point+"/")) {
			continue
		}
		if !ok || len(m.Point) >= len(holder.Point) {
			holder, ok = m, true
		}
	}
	return holder, ok
}

// Top returns the topmost mount on dir in this process's mount table.
func Top(dir string) (Mount, bool) { return Read().Top(dir) }

// IsMountPoint reports whether dir is the mount point of some mount in
// this process's mount namespace.
func IsMountPoint(dir string) bool {
	_, ok := Top(dir)
	return ok
}

// DeviceOf is the device ("major:minor", as Mount.Dev spells it) of the
// file system holding path, as stat(2) sees it now.
func DeviceOf(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)), nil
}

// unescape undoes the kernel's octal escapes (\040 for space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + (c - '0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
