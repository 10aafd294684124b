package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// Machine describes where the figures were taken: a ratio from one run
// means little without it.
type Machine struct {
	CPUs      int    `json:"nproc"`
	CPUModel  string `json:"cpu_model"`
	MemTotal  int64  `json:"mem_total_bytes"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	// DiskFS is the file system holding the local copy and the cache
	// ("ext4 on /dev/vda").
	DiskFS string `json:"disk_fs,omitempty"`
}

// describeMachine reads /proc; a field it cannot read stays empty. dir is
// where the local copy and the caches live.
func describeMachine(dir string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPUModel = parseCPUModel(b)
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m.MemTotal, _ = parseStatusField(b, "MemTotal")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		if fstype, src := mountOf(b, dir); fstype != "" {
			m.DiskFS = fstype + " on " + src
		}
	}
	return m
}

// loadAvg is the 1, 5 and 15 minute load averages: other work on the
// machine during a run shows up here, and the reader should see it.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// parseCPUModel returns the first "model name" of /proc/cpuinfo.
func parseCPUModel(cpuinfo []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// markdownLine is the report header's line about m, ending in a blank
// line; what names the data that sat on m.DiskFS ("data and cache").
func (m Machine) markdownLine(what string) string {
	line := fmt.Sprintf("Machine: %d CPUs (%s), %.1f GiB RAM, Linux %s, %s", m.CPUs, m.CPUModel, float64(m.MemTotal)/(1<<30), m.Kernel, m.GoVersion)
	if m.DiskFS != "" {
		line += fmt.Sprintf(", %s on %s", what, m.DiskFS)
	}
	return line + "\n\n"
}
