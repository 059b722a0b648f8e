package netlab

import (
	"os"
	"testing"
)

// covers: P2
// The bench reads a process's memory from /proc: this process's own figures are there and
// consistent (the peak is at least the current RSS, which is its anonymous and file parts).
func TestProcMemoryOfThisProcess(t *testing.T) {
	hwm, rss, err := ProcMemory(os.Getpid())
	if err != nil || rss <= 0 || hwm < rss {
		t.Fatalf("VmHWM %v, VmRSS %v, %v", hwm, rss, err)
	}
	anon, file, err := ProcRSSParts(os.Getpid())
	if err != nil || anon <= 0 || file <= 0 || anon+file > rss+1 {
		t.Fatalf("RssAnon %v, RssFile %v (VmRSS %v), %v", anon, file, rss, err)
	}
	if _, _, err := ProcMemory(-1); err == nil {
		t.Error("a process that does not exist was read")
	}
}
