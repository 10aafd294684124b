package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/PID/stat. It is
// 100 on every Linux architecture Go supports (the kernel fixes it for
// user space whatever CONFIG_HZ is), and Go has no sysconf to ask.
const clockTicks = 100

// stealCPU returns the CPU time the hypervisor has taken from this
// machine's virtual CPUs so far (all CPUs; 0 on bare metal).
func stealCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseSteal(b)
}

// parseSteal reads the steal field (the 8th value) of the aggregate "cpu"
// line of the content of /proc/stat.
func parseSteal(stat []byte) (time.Duration, error) {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("proc stat: no steal field in %q", line)
	}
	ticks, err := strconv.ParseInt(f[8], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("proc stat: steal %q: %w", f[8], err)
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// procCPU returns the user+system CPU time a process has used so far.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime and stime (fields 14 and 15) from the content
// of /proc/PID/stat. The command name (field 2) is in parentheses and may
// itself hold spaces and parentheses, so fields are counted after the last
// ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat: no command name in %q", stat)
	}
	// After ")": field 3 (state) is rest[0], so field N is rest[N-3].
	rest := strings.Fields(string(stat[i+1:]))
	if len(rest) < 13 {
		return 0, fmt.Errorf("proc stat: %d fields after the command name, want at least 13", len(rest))
	}
	var ticks int64
	for _, f := range rest[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc stat: cpu field %q: %w", f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// procPeakRSS returns VmHWM, the process's peak resident set, in bytes.
func procPeakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseStatusField(b, "VmHWM")
}

// resetPeakRSS makes VmHWM start again from the current RSS (writing 5 to
// clear_refs), so each phase reports its own peak.
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// parseStatusField reads a "Name:   1234 kB" line of /proc/PID/status and
// returns it in bytes.
func parseStatusField(status []byte, name string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != name {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("proc status: %s: unexpected value %q", name, v)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc status: %s: %w", name, err)
		}
		return n << 10, nil
	}
	return 0, fmt.Errorf("proc status: no %s line", name)
}

// selfCPU is the benchmark process's own user+system CPU time: the
// in-process proxy and the reading goroutines.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// mountedAt reports whether dir is a mount point according to the content
// of /proc/self/mountinfo, and the file system type there (the last mount
// on dir wins, as the kernel resolves it).
func mountedAt(mountinfo []byte, dir string) (fstype string, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superopts
		f := strings.Fields(sc.Text())
		if len(f) < 7 || unescapeMountinfo(f[4]) != dir {
			continue
		}
		for i := 6; i < len(f)-1; i++ {
			if f[i] == "-" {
				fstype, ok = f[i+1], true
				break
			}
		}
	}
	return fstype, ok
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space,
// \011, \012, \134) in mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountOf returns the file system type and source of the mount holding
// path, from the content of /proc/self/mountinfo (the longest mount point
// that is a prefix of path; the last one listed wins a tie).
func mountOf(mountinfo []byte, path string) (fstype, source string) {
	best := -1
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if !(path == mp || mp == "/" || strings.HasPrefix(path, mp+"/")) || len(mp) < best {
			continue
		}
		for i := 6; i < len(f)-2; i++ {
			if f[i] == "-" {
				best, fstype, source = len(mp), f[i+1], unescapeMountinfo(f[i+2])
				break
			}
		}
	}
	return fstype, source
}
