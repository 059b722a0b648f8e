package status

import (
	"reflect"
	"testing"
)

// covers: N6, O2
// FuzzDecode: the status ConfigMap is read by the plugin and the probes, and anyone who may edit
// it may write anything there. Decoding never panics; what decodes encodes again and decodes to
// the same (the plugin shows what the controller published, nothing else).
func FuzzDecode(f *testing.F) {
	f.Add("v0.3.0", `{"loadBalancer":true}`, `{"transport":"exec"}`, "2026-12-02T10:00:00Z", "pod-1", `{"gw1":{"identities":3}}`, "", `[{"type":"Serving","status":"True","reason":"KubeOVNDoesNotServeServices","message":"m","lastTransitionTime":"2026-12-02T10:00:00Z"}]`)
	f.Add("", "not json", "[]", "yesterday", "", "{", "true", "[{}]")
	// A gateway with VIPs the Vpc's routes drop (SPEC V3); documents without these fields decode too.
	f.Add("v0.4.0", `{}`, `{}`, "2026-12-02T10:00:00Z", "", `{"gw1":{"identities":1,"routes":{"nextHops":["10.0.1.254"],"vips":2,"synced":true,"unroutedVIPs":2,"unrouted":"text"}}}`, "", "")
	f.Fuzz(func(t *testing.T, version, gates, flags, heartbeat, holder, gateways, stopped, conditions string) {
		data := map[string]string{KeyVersion: version, KeyGates: gates, KeyFlags: flags, KeyHeartbeat: heartbeat,
			KeyHolder: holder, KeyGateways: gateways, KeyConditions: conditions}
		if stopped != "" {
			data[KeyStopped] = stopped
		}
		p, err := Decode(data)
		if err != nil {
			return
		}
		enc, err := Encode(p)
		if err != nil {
			t.Fatalf("what decoded does not encode: %v", err)
		}
		q, err := Decode(enc)
		if err != nil {
			t.Fatalf("the encoding of what decoded does not decode: %v\n%v", err, enc)
		}
		if !reflect.DeepEqual(comparableForm(p), comparableForm(q)) {
			t.Fatalf("changed through its encoding:\n%+v\n%+v", p, q)
		}
	})
}

// comparableForm spells what the encoding does not tell apart one way: no conditions, and
// instants.
func comparableForm(p Published) Published {
	if len(p.Conditions) == 0 {
		p.Conditions = nil
	}
	if len(p.Gateways) == 0 {
		p.Gateways = nil
	}
	p.Heartbeat, p.Stopped = p.Heartbeat.UTC(), p.Stopped.UTC()
	return p
}
