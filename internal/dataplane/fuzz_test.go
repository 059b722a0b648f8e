package dataplane

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// covers: N6, D8
// FuzzStateLine: whatever line reaches the agent, decoding it never panics; a line that decodes
// is judged by the same checks the agent applies (shape, then identity by identity) without
// panicking, and a state that passes them survives its own encoding unchanged, so that what the
// agent programs is what the line said.
func FuzzStateLine(f *testing.F) {
	for _, seed := range []string{
		`{"generation":1,"identities":[{"vip":"172.18.0.10","port":80,"protocol":"tcp","backends":[{"ip":"10.0.1.11","port":8080}]}],"clusterIPs":["10.96.0.10"]}`,
		`{"generation":2,"base":1,"identities":[],"removed":[{"vip":"172.18.0.10","port":80,"protocol":"udp"}]}`,
		`{"ping":7}`,
		`{"generation":3,"identities":[],"release":true}`,
		`{"generation":1,"identities":[{"vip":"10.0.1.300","port":80,"protocol":"tcp"}]}`,
		`{"generation":1}{"generation":2}`,
		`{"generation":1,"identities":[{"vip":"172.18.0.10","port":70000,"protocol":"sctp","affinityTimeoutSeconds":-1,"sourceRanges":["0.0.0.0/0","::/0"]}]}`,
		`[]`, `null`, ``, `{`, "\x00",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		st, err := DecodeStateLine(line)
		if err != nil {
			return
		}
		st.Normalize()
		if st.ValidateShape() != nil {
			return
		}
		for _, id := range st.Identities {
			_ = id.Validate()
		}
		if st.Validate() != nil {
			return
		}
		data, err := json.Marshal(st)
		if err != nil {
			t.Fatalf("a valid state does not encode: %v", err)
		}
		again, err := DecodeStateLine(data)
		if err != nil {
			t.Fatalf("a valid state's encoding does not decode: %v\n%s", err, data)
		}
		again.Normalize()
		if !reflect.DeepEqual(canonical(st), canonical(again)) {
			t.Fatalf("a valid state changed through its encoding:\n%+v\n%+v", st, again)
		}
	})
}

// canonical gives nil and empty slices one spelling, as the encoding does.
func canonical(s gwstate.State) gwstate.State {
	if len(s.Identities) == 0 {
		s.Identities = nil
	}
	if len(s.ClusterIPs) == 0 {
		s.ClusterIPs = nil
	}
	if len(s.Removed) == 0 {
		s.Removed = nil
	}
	for i := range s.Identities {
		id := &s.Identities[i]
		if len(id.Backends) == 0 {
			id.Backends = nil
		}
		if len(id.SourceRanges) == 0 {
			id.SourceRanges = nil
		}
	}
	return s
}
