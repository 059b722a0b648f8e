package cluster

import (
	"bufio"
	"io"
	"strings"

	"github.com/vpcgw/vpcgw/internal/labout"
)

// LogTopic is something the lab looks for in kube-ovn-controller's log.
type LogTopic struct {
	Name string
	// Word makes Name match only as a whole word: "demo/web" names the Service, not its Pods
	// "demo/web-7744dfd755-xhcrw".
	Word bool
}

// LogTopics are what kube-ovn-controller may have done or failed to do because of vpcgw: the
// served Service, vpcgw's records, DNATs, finalizers, vpcgw itself. Matched case-insensitively.
var LogTopics = []LogTopic{
	{Name: DemoNamespace + "/" + DemoService, Word: true}, {Name: "servicerecord"}, {Name: "dnat"}, {Name: "finalizer"}, {Name: "vpcgw"},
}

func (t LogTopic) matches(lower string) bool {
	needle := strings.ToLower(t.Name)
	for i := 0; ; {
		j := strings.Index(lower[i:], needle)
		if j < 0 {
			return false
		}
		end := i + j + len(needle)
		if !t.Word || ((i+j == 0 || !wordByte(lower[i+j-1])) && (end == len(lower) || !wordByte(lower[end]))) {
			return true
		}
		i = end
	}
}

func wordByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-' || b == '_' || b == '.'
}

// LogSummary counts what kube-ovn-controller logged (by klog severity) and keeps its error and
// warning messages, and the lines naming each topic.
type LogSummary struct {
	Lines, Errors, Warnings int
	// Problems are the distinct error and warning messages (klog header removed), in order of
	// first appearance, with how often each was logged.
	Problems []Problem
	// ByTopic holds, per topic name, the lines naming it.
	ByTopic map[string][]string
}

// Problem is one distinct error or warning message.
type Problem struct {
	Severity byte // 'E', 'W' or 'F'
	Message  string
	First    string // the first line logging it, header included
	Count    int
}

// SummarizeKubeOVNLog reads a klog stream ("E1201 09:30:00.123456   26761 file.go:12] msg").
func SummarizeKubeOVNLog(log string, topics []LogTopic) LogSummary {
	s := LogSummary{ByTopic: map[string][]string{}}
	seen := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		s.Lines++
		if sev := klogSeverity(line); sev == 'E' || sev == 'F' || sev == 'W' {
			if sev == 'W' {
				s.Warnings++
			} else {
				s.Errors++
			}
			msg := line
			if _, after, ok := strings.Cut(line, "] "); ok {
				msg = after
			}
			if i, ok := seen[msg]; ok {
				s.Problems[i].Count++
			} else {
				seen[msg] = len(s.Problems)
				s.Problems = append(s.Problems, Problem{Severity: sev, Message: msg, First: line, Count: 1})
			}
		}
		lower := strings.ToLower(line)
		for _, t := range topics {
			if t.matches(lower) {
				s.ByTopic[t.Name] = append(s.ByTopic[t.Name], line)
			}
		}
	}
	return s
}

// klogSeverity is the severity letter of a klog header line (I, W, E, F), or 0.
func klogSeverity(line string) byte {
	if len(line) < 5 || !strings.ContainsRune("IWEF", rune(line[0])) {
		return 0
	}
	for _, c := range line[1:5] {
		if c < '0' || c > '9' {
			return 0
		}
	}
	return line[0]
}

// Write prints the summary: every distinct problem, and per topic at most limit lines, each
// line cut to width. It returns the first write error.
func (s LogSummary) Write(w io.Writer, topics []LogTopic, limit, width int) error {
	cut := func(l string) string {
		if len(l) > width {
			return l[:width] + "..."
		}
		return l
	}
	out := labout.New(w)
	out.Printf("   %d lines: %d errors, %d warnings (%d distinct)\n", s.Lines, s.Errors, s.Warnings, len(s.Problems))
	for _, p := range s.Problems {
		out.Printf("     %3dx %s\n", p.Count, cut(p.First))
	}
	for _, t := range topics {
		lines := s.ByTopic[t.Name]
		out.Printf("   lines naming %q: %d\n", t.Name, len(lines))
		for i, l := range lines {
			if i == limit {
				out.Printf("     ... %d more\n", len(lines)-limit)
				break
			}
			out.Printf("     %s\n", cut(l))
		}
	}
	return out.Err()
}
