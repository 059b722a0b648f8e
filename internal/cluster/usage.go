package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ComponentUsage is what one component of the lab (processes of one name) uses: their CPU time
// since they started, their CPU share over a quiet window, and their resident memory now.
type ComponentUsage struct {
	Name       string
	Processes  int
	CPUSeconds float64 // user + system since start
	IdleCPU    float64 // cores used during the window (0.05 = 5 % of one core)
	RSSMiB     float64
}

// procSample is one process of the lab at one moment.
type procSample struct {
	pid, ppid int
	name      string
	cpu       float64 // seconds
	rssMiB    float64
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux Go runs on.
const clockTicks = 100

// LabUsage measures every process this process started, directly or not (the lab's own
// descendants, never another lab's): CPU time and memory per component, over a window of the
// given length in which the lab is left alone. The chassis (ovs-vswitchd, ovn-controller and its
// ovsdb-server) are named as such, so that what the OVN data path costs reads off one line each.
func LabUsage(window time.Duration) ([]ComponentUsage, error) {
	before, err := descendants(os.Getpid())
	if err != nil {
		return nil, err
	}
	time.Sleep(window) // the measurement's window, not a wait for an event
	after, err := descendants(os.Getpid())
	if err != nil {
		return nil, err
	}
	startCPU := map[int]float64{}
	for _, p := range before {
		startCPU[p.pid] = p.cpu
	}
	byName := map[string]*ComponentUsage{}
	for _, p := range after {
		u := byName[p.name]
		if u == nil {
			u = &ComponentUsage{Name: p.name}
			byName[p.name] = u
		}
		u.Processes++
		u.CPUSeconds += p.cpu
		u.RSSMiB += p.rssMiB
		if c, ok := startCPU[p.pid]; ok {
			u.IdleCPU += (p.cpu - c) / window.Seconds()
		}
	}
	out := make([]ComponentUsage, 0, len(byName))
	for _, u := range byName {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RSSMiB > out[j].RSSMiB })
	return out, nil
}

// WriteUsage prints LabUsage's table with a total line.
func WriteUsage(w io.Writer, us []ComponentUsage, window time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-34s %5s %10s %12s %9s\n", "component", "procs", "CPU (s)", "idle CPU %", "RSS MiB")
	var total ComponentUsage
	for _, u := range us {
		fmt.Fprintf(&b, "%-34s %5d %10.1f %12.1f %9.0f\n", u.Name, u.Processes, u.CPUSeconds, 100*u.IdleCPU, u.RSSMiB)
		total.Processes += u.Processes
		total.CPUSeconds += u.CPUSeconds
		total.IdleCPU += u.IdleCPU
		total.RSSMiB += u.RSSMiB
	}
	fmt.Fprintf(&b, "%-34s %5d %10.1f %12.1f %9.0f\n", "total", total.Processes, total.CPUSeconds, 100*total.IdleCPU, total.RSSMiB)
	fmt.Fprintf(&b, "(CPU since each process started; idle CPU over %s with no traffic; RSS counts shared pages once per process)\n", window)
	_, err := io.WriteString(w, b.String())
	return err
}

// descendants reads /proc for the processes below root (not root itself).
func descendants(root int) ([]procSample, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("reading /proc: %w", err)
	}
	all := map[int]procSample{}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, err := readProc(pid)
		if err != nil {
			continue // ended between the listing and the read
		}
		all[pid] = p
		children[p.ppid] = append(children[p.ppid], pid)
	}
	var out []procSample
	queue := append([]int(nil), children[root]...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		out = append(out, all[pid])
		queue = append(queue, children[pid]...)
	}
	return out, nil
}

// readProc reads one process's parent, name, CPU time and resident memory.
func readProc(pid int) (procSample, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return procSample{}, err
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split at the last ')'.
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return procSample{}, errors.New("malformed stat")
	}
	fields := strings.Fields(string(stat[end+1:]))
	if len(fields) < 13 {
		return procSample{}, errors.New("short stat")
	}
	ppid, _ := strconv.Atoi(fields[1])
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	p := procSample{pid: pid, ppid: ppid, cpu: (utime + stime) / clockTicks}
	p.name = componentName(dir)
	if status, err := os.ReadFile(filepath.Join(dir, "status")); err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				p.rssMiB = kb / 1024
			}
		}
	}
	return p, nil
}

// componentName names a process by its program, and an ovsdb-server by the database it serves
// (OVN's NB and SB, or a chassis's Open_vSwitch).
func componentName(dir string) string {
	cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil || len(cmdline) == 0 {
		return "(unknown)"
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	name := filepath.Base(args[0])
	switch name {
	case "ovsdb-server":
		for _, a := range args[1:] {
			if strings.HasSuffix(a, ".db") {
				if db := filepath.Base(a); db != "conf.db" {
					return name + " " + db
				}
				return name + " conf.db (chassis)"
			}
		}
	case "ovs-vswitchd", "ovn-controller":
		return name + " (chassis)"
	}
	return name
}
