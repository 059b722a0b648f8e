package netlab

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcMemory returns a process's peak and current resident memory (VmHWM, VmRSS) in MiB, for
// benchmarks that measure a child process (an agent, a controller) on its own.
func ProcMemory(pid int) (hwmMiB, rssMiB float64, err error) {
	m, err := procStatusMiB(pid)
	return m["VmHWM:"], m["VmRSS:"], err
}

// ProcRSSParts is a process's resident memory by kind, in MiB: anonymous (its heap, stacks and
// runtime) and file-backed (its binary's pages and mapped files, which the kernel can drop and
// read again), from /proc/<pid>/status.
func ProcRSSParts(pid int) (anonMiB, fileMiB float64, err error) {
	m, err := procStatusMiB(pid)
	return m["RssAnon:"], m["RssFile:"], err
}

// procStatusMiB reads the kB figures of /proc/<pid>/status, in MiB, by their field name.
func procStatusMiB(pid int) (map[string]float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == "kB" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			out[f[0]] = kb / 1024
		}
	}
	return out, nil
}
