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
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmHWM:":
			hwmMiB = kb / 1024
		case "VmRSS:":
			rssMiB = kb / 1024
		}
	}
	return hwmMiB, rssMiB, nil
}

// ProcRSSParts is a process's resident memory by kind, in MiB: anonymous (its heap, stacks and
// runtime) and file-backed (its binary's pages and mapped files, which the kernel can drop and
// read again), from /proc/<pid>/status.
func ProcRSSParts(pid int) (anonMiB, fileMiB float64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "RssAnon:":
			anonMiB = kb / 1024
		case "RssFile:":
			fileMiB = kb / 1024
		}
	}
	return anonMiB, fileMiB, nil
}
