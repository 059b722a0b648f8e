package cluster_test

import (
	"strings"
	"testing"

	"github.com/vpcgw/vpcgw/internal/cluster"
)

// The lab's report of what kube-ovn-controller logged (for the note) counts klog
// severities, collapses repeated problems, and names the Service only where its name is meant.
//
// covers: O1
func TestSummarizeKubeOVNLog(t *testing.T) {
	log := strings.Join([]string{
		`I1201 09:37:16.468263   26761 config.go:386] config is &{OvnNbAddr:tcp:127.0.0.1:43635}`,
		`W1201 09:37:17.886888   26761 init.go:726] subnet join is not ready`,
		`E1201 09:37:17.887336   26761 controller.go:1579] "Unhandled Error" err="error syncing vpc nat gateway \"lab-gw\": iptables nat gw not enable, requeuing"`,
		`E1201 09:37:18.887336   26761 controller.go:1579] "Unhandled Error" err="error syncing vpc nat gateway \"lab-gw\": iptables nat gw not enable, requeuing"`,
		`I1201 09:37:34.800567   26761 pod.go:242] enqueue add pod demo/web-7744dfd755-xhcrw`,
		`I1201 09:37:34.878037   26761 service.go:41] enqueue add service demo/web`,
		`I1201 09:37:34.900000   26761 service.go:99] update service "demo/web": add finalizer`,
		`I1201 09:37:16.682294   26761 reflector.go:367] "Starting reflector" type="*v1.IptablesDnatRule"`,
		`:DNAT_FILTER - [0:0]`,
		``,
	}, "\n")
	s := cluster.SummarizeKubeOVNLog(log, cluster.LogTopics)
	if s.Lines != 9 || s.Errors != 2 || s.Warnings != 1 {
		t.Errorf("lines/errors/warnings = %d/%d/%d, want 9/2/1", s.Lines, s.Errors, s.Warnings)
	}
	if len(s.Problems) != 2 || s.Problems[0].Severity != 'W' || s.Problems[1].Count != 2 ||
		!strings.HasPrefix(s.Problems[1].Message, `"Unhandled Error"`) {
		t.Errorf("problems = %+v, want the warning once and the repeated error counted twice", s.Problems)
	}
	svc := s.ByTopic[cluster.DemoNamespace+"/"+cluster.DemoService]
	if len(svc) != 2 || !strings.Contains(svc[0], "service demo/web") || !strings.Contains(svc[1], `"demo/web"`) {
		t.Errorf("lines naming the Service = %q, want its two lines and not its Pod's", svc)
	}
	if got := len(s.ByTopic["dnat"]); got != 2 {
		t.Errorf("lines naming dnat = %d, want 2 (any case)", got)
	}
	if got := len(s.ByTopic["finalizer"]); got != 1 {
		t.Errorf("lines naming a finalizer = %d, want 1", got)
	}
	if got := len(s.ByTopic["vpcgw"]); got != 0 {
		t.Errorf("lines naming vpcgw = %d, want 0", got)
	}
	var out strings.Builder
	if err := s.Write(&out, cluster.LogTopics, 1, 60); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "2x E1201") || !strings.Contains(out.String(), "... 1 more") {
		t.Errorf("printed summary lacks the repeat count or the cut:\n%s", out.String())
	}
}
