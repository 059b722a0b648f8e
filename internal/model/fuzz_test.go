package model

import (
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
)

// covers: R5, R6, N6, I3
// FuzzRecords: records are read back from the API, where anyone with write access to them (or a
// restored backup) may have put anything. Whatever a Service's records of either form say, the
// model plans without panicking, and every identity it gives the gateway is one the agent
// accepts: what a record says decides what is programmed only through the same checks as a
// Service's own spec.
func FuzzRecords(f *testing.F) {
	f.Add([]byte(`{"service":{"namespace":"ns","name":"web","uid":"uid-web"},"gateway":"gw1","eip":"eip1","eipAddress":"172.18.0.10","clusterIP":"10.96.0.10","ports":[{"port":80,"protocol":"tcp","backends":["10.0.1.11:8080"]}]}`),
		[]byte(`{"spec":{"eip":"eip1","externalPort":"80","protocol":"tcp","internalIp":"10.0.1.11","internalPort":"8080"},"status":{"ready":true,"v4ip":"172.18.0.10"}}`))
	f.Add([]byte(`{"eipAddress":"172.18.0.300","clusterIP":"::1","ports":[{"port":-1,"protocol":"SCTP","backends":["x","10.0.1.11:99999"]}]}`),
		[]byte(`{"spec":{"externalPort":"eighty","protocol":"icmp","internalIp":"127.0.0.1"},"status":{"v4ip":"not an address"}}`))
	f.Add([]byte(`{"sourceRanges":["0.0.0.0/0","10.0.0.0/33"],"sessionAffinityTimeoutSeconds":-5}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, serviceRecord, dnatRule []byte) {
		var sr vpcgwv1alpha1.ServiceRecord
		var dr kubeovnv1.IptablesDnatRule
		if json.Unmarshal(serviceRecord, &sr.Spec) != nil || json.Unmarshal(dnatRule, &dr) != nil {
			return
		}
		svc := service("web", t0)
		labels := map[string]string{LabelRecord: "true", LabelRecordUID: string(svc.UID), LabelRecordNamespace: "ns", LabelRecordName: "web", LabelGateway: "gw1"}
		sr.ObjectMeta = metav1.ObjectMeta{Name: ServiceRecordName("ns", "web", svc.UID), Labels: labels}
		dr.ObjectMeta = metav1.ObjectMeta{Name: "lb-web-fuzz", Labels: labels}
		for _, gates := range []Gates{srGates, bothGates} {
			snap := baseSnapshot(svc)
			snap.ServiceRecords = []vpcgwv1alpha1.ServiceRecord{sr}
			snap.Records = []kubeovnv1.IptablesDnatRule{dr}
			p := Compute(snap, gates)
			if err := p.Gateway("gw1").State.Validate(); err != nil {
				t.Fatalf("the gateway's state from these records is one the agent refuses: %v", err)
			}
		}
	})
}
