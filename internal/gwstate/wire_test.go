// covers: D8, N6 (the wire contract: golden lines, typed addresses, malformed text refused whole)
package gwstate

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// Golden lines of the wire contract: one of each message kind, with every field a state carries.
const (
	goldenState = `{"generation":7,"identities":[` +
		`{"vip":"10.96.0.10","port":53,"protocol":"udp","backends":[{"ip":"10.0.1.11","port":5353},{"ip":"10.0.1.12","port":5353}],` +
		`"draining":[{"ip":"10.0.1.13","port":5353}],"group":"0123456789ab"},` +
		`{"vip":"172.18.0.10","port":80,"protocol":"tcp","backends":[{"ip":"10.0.1.9","port":8080},{"ip":"10.0.1.10","port":8080}],` +
		`"affinityTimeoutSeconds":10800,"sourceRanges":["10.1.0.0/16","192.168.0.0/24"],"group":"0123456789ab"},` +
		`{"vip":"172.18.0.10","port":81,"protocol":"tcp","backends":[]}],` +
		`"clusterIPs":["10.96.0.9","10.96.0.10"]}`
	goldenDelta = `{"generation":8,"identities":[` +
		`{"vip":"172.18.0.10","port":80,"protocol":"tcp","backends":[{"ip":"10.0.1.10","port":8080}],"group":"0123456789ab"}],` +
		`"clusterIPs":["10.96.0.10"],"base":7,` +
		`"removed":[{"vip":"10.96.0.10","port":53,"protocol":"udp"},{"vip":"172.18.0.10","port":81,"protocol":"tcp"}]}`
	goldenAck = `{"generation":8,"conntrackDeleted":3,"deltas":true,"keepalive":true,"agentVersion":"v1.2.3","protocol":3,` +
		`"refused":[{"vip":"172.18.0.10","port":80,"protocol":"tcp","reason":"identity 172.18.0.10:80:tcp: backend 127.0.0.1:8080: 127.0.0.1 is a loopback address"}]}`
)

// The typed values the golden lines hold.
func goldenValues() (State, State, Ack) {
	a := netip.MustParseAddr
	st := State{
		Generation: 7,
		Identities: []Identity{
			{VIP: a("10.96.0.10"), Port: 53, Protocol: UDP, Backends: []Backend{{a("10.0.1.11"), 5353}, {a("10.0.1.12"), 5353}},
				Draining: []Backend{{a("10.0.1.13"), 5353}}, Group: "0123456789ab"},
			{VIP: a("172.18.0.10"), Port: 80, Protocol: TCP, Backends: []Backend{{a("10.0.1.9"), 8080}, {a("10.0.1.10"), 8080}},
				AffinityTimeoutSeconds: 10800, SourceRanges: []string{"10.1.0.0/16", "192.168.0.0/24"}, Group: "0123456789ab"},
			{VIP: a("172.18.0.10"), Port: 81, Protocol: TCP, Backends: []Backend{}},
		},
		ClusterIPs: []netip.Addr{a("10.96.0.9"), a("10.96.0.10")},
	}
	delta := State{
		Generation: 8, Base: 7,
		Identities: []Identity{{VIP: a("172.18.0.10"), Port: 80, Protocol: TCP, Backends: []Backend{{a("10.0.1.10"), 8080}}, Group: "0123456789ab"}},
		ClusterIPs: []netip.Addr{a("10.96.0.10")},
		Removed:    []IdentityKey{{a("10.96.0.10"), 53, UDP}, {a("172.18.0.10"), 81, TCP}},
	}
	ack := Ack{Generation: 8, ConntrackDeleted: 3, Deltas: true, Keepalive: true, AgentVersion: "v1.2.3", Protocol: ProtocolVersion,
		Refused: []Refusal{{IdentityKey: IdentityKey{a("172.18.0.10"), 80, TCP},
			Reason: "identity 172.18.0.10:80:tcp: backend 127.0.0.1:8080: 127.0.0.1 is a loopback address"}}}
	return st, delta, ack
}

// The contract as it was with string addresses: what a controller or agent of that version
// writes and reads. Field names and tags as they were.
type (
	oldState struct {
		Generation int64         `json:"generation"`
		Identities []oldIdentity `json:"identities"`
		ClusterIPs []string      `json:"clusterIPs,omitempty"`
		Base       int64         `json:"base,omitempty"`
		Removed    []oldKey      `json:"removed,omitempty"`
		Ping       int64         `json:"ping,omitempty"`
	}
	oldIdentity struct {
		VIP                    string       `json:"vip"`
		Port                   int32        `json:"port"`
		Protocol               Protocol     `json:"protocol"`
		Backends               []oldBackend `json:"backends"`
		Draining               []oldBackend `json:"draining,omitempty"`
		AffinityTimeoutSeconds int32        `json:"affinityTimeoutSeconds,omitempty"`
		SourceRanges           []string     `json:"sourceRanges,omitempty"`
		Group                  string       `json:"group,omitempty"`
	}
	oldBackend struct {
		IP   string `json:"ip"`
		Port int32  `json:"port"`
	}
	oldKey struct {
		VIP      string   `json:"vip"`
		Port     int32    `json:"port"`
		Protocol Protocol `json:"protocol"`
	}
	oldAck struct {
		Generation       int64        `json:"generation"`
		Error            string       `json:"error,omitempty"`
		ConntrackDeleted int          `json:"conntrackDeleted,omitempty"`
		Deltas           bool         `json:"deltas,omitempty"`
		Keepalive        bool         `json:"keepalive,omitempty"`
		Pong             int64        `json:"pong,omitempty"`
		AgentVersion     string       `json:"agentVersion,omitempty"`
		Protocol         int          `json:"protocol,omitempty"`
		Refused          []oldRefusal `json:"refused,omitempty"`
	}
	oldRefusal struct {
		oldKey
		Reason string `json:"reason"`
	}
)

// The golden lines decode to the typed values and encode back byte for byte: typed addresses did
// not change the wire.
func TestWireGoldenRoundTrip(t *testing.T) {
	st, delta, ack := goldenValues()
	for _, c := range []struct {
		name, line string
		into, want any
	}{
		{"state", goldenState, &State{}, &st},
		{"delta", goldenDelta, &State{}, &delta},
		{"ack", goldenAck, &Ack{}, &ack},
	} {
		if err := json.Unmarshal([]byte(c.line), c.into); err != nil {
			t.Fatalf("%s: decoding the golden line: %v", c.name, err)
		}
		if !reflect.DeepEqual(c.into, c.want) {
			t.Errorf("%s: decoded %+v, want %+v", c.name, c.into, c.want)
		}
		out, err := json.Marshal(c.into)
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != c.line {
			t.Errorf("%s: re-encoded\n%s\nwant the golden line\n%s", c.name, out, c.line)
		}
		if out, _ := json.Marshal(c.want); string(out) != c.line {
			t.Errorf("%s: the typed values encode to\n%s\nwant the golden line\n%s", c.name, out, c.line)
		}
	}
	if err := st.Validate(); err != nil {
		t.Errorf("the golden state does not validate: %v", err)
	}
	var norm State
	_ = json.Unmarshal([]byte(goldenState), &norm)
	if norm.Normalize(); !reflect.DeepEqual(norm, st) {
		t.Errorf("the golden state is not normalized: Normalize gives %+v", norm)
	}
	if err := delta.Validate(); err != nil {
		t.Errorf("the golden delta does not validate: %v", err)
	}
}

// What the string-typed contract wrote is exactly the golden lines, which the typed contract
// reads as the expected values; and the string-typed contract reads the typed one's lines back
// unchanged (an older agent or controller on the other end).
func TestWireCompatibleWithStringTypes(t *testing.T) {
	old := oldState{
		Generation: 7,
		Identities: []oldIdentity{
			{VIP: "10.96.0.10", Port: 53, Protocol: UDP, Backends: []oldBackend{{"10.0.1.11", 5353}, {"10.0.1.12", 5353}},
				Draining: []oldBackend{{"10.0.1.13", 5353}}, Group: "0123456789ab"},
			{VIP: "172.18.0.10", Port: 80, Protocol: TCP, Backends: []oldBackend{{"10.0.1.9", 8080}, {"10.0.1.10", 8080}},
				AffinityTimeoutSeconds: 10800, SourceRanges: []string{"10.1.0.0/16", "192.168.0.0/24"}, Group: "0123456789ab"},
			{VIP: "172.18.0.10", Port: 81, Protocol: TCP, Backends: []oldBackend{}},
		},
		ClusterIPs: []string{"10.96.0.9", "10.96.0.10"},
	}
	oldDelta := oldState{
		Generation: 8, Base: 7,
		Identities: []oldIdentity{{VIP: "172.18.0.10", Port: 80, Protocol: TCP, Backends: []oldBackend{{"10.0.1.10", 8080}}, Group: "0123456789ab"}},
		ClusterIPs: []string{"10.96.0.10"},
		Removed:    []oldKey{{"10.96.0.10", 53, UDP}, {"172.18.0.10", 81, TCP}},
	}
	oldAcked := oldAck{Generation: 8, ConntrackDeleted: 3, Deltas: true, Keepalive: true, AgentVersion: "v1.2.3", Protocol: 3,
		Refused: []oldRefusal{{oldKey{"172.18.0.10", 80, TCP}, "identity 172.18.0.10:80:tcp: backend 127.0.0.1:8080: 127.0.0.1 is a loopback address"}}}

	st, delta, ack := goldenValues()
	for _, c := range []struct {
		name, line   string
		old          any
		typed, want  any
		oldRoundTrip any
	}{
		{"state", goldenState, old, &State{}, &st, &oldState{}},
		{"delta", goldenDelta, oldDelta, &State{}, &delta, &oldState{}},
		{"ack", goldenAck, oldAcked, &Ack{}, &ack, &oldAck{}},
	} {
		line, err := json.Marshal(c.old)
		if err != nil {
			t.Fatal(err)
		}
		if string(line) != c.line {
			t.Fatalf("%s: the string types wrote\n%s\nwant the golden line\n%s", c.name, line, c.line)
		}
		if err := json.Unmarshal(line, c.typed); err != nil {
			t.Fatalf("%s: the typed contract cannot read the string types' line: %v", c.name, err)
		}
		if !reflect.DeepEqual(c.typed, c.want) {
			t.Errorf("%s: decoded %+v, want %+v", c.name, c.typed, c.want)
		}
		typedLine, _ := json.Marshal(c.want)
		if err := json.Unmarshal(typedLine, c.oldRoundTrip); err != nil {
			t.Fatalf("%s: the string types cannot read the typed line: %v", c.name, err)
		}
		if again, _ := json.Marshal(c.oldRoundTrip); !bytes.Equal(again, typedLine) {
			t.Errorf("%s: the string types read and wrote\n%s\nwant\n%s", c.name, again, typedLine)
		}
	}
}

// An address text that does not parse makes the line undecodable (a malformed message, answered
// whole); one that parses but may not be used decodes and is refused by Identity.Validate.
func TestWireMalformedAddress(t *testing.T) {
	line := func(backend string) string {
		return `{"generation":9,"identities":[{"vip":"10.0.0.1","port":80,"protocol":"tcp","backends":[{"ip":"` + backend + `","port":8080}]}]}`
	}
	for _, bad := range []string{"10.0.1.300", "10.0.1", "10.0.1.1 ", "pod-a", "010.0.1.1"} {
		var st State
		if err := json.Unmarshal([]byte(line(bad)), &st); err == nil {
			t.Errorf("backend %q: decoded to %+v, want a decoding error", bad, st)
		}
	}
	for _, c := range []struct{ addr, want string }{{"fd00::1", "not an IPv4 address"}, {"127.0.0.1", "loopback"}, {"", `"" is not an IPv4 address`}} {
		var st State
		if err := json.Unmarshal([]byte(line(c.addr)), &st); err != nil {
			t.Fatalf("backend %q: %v, want it decoded", c.addr, err)
		}
		if err := st.ValidateShape(); err != nil {
			t.Errorf("backend %q: the message is refused whole: %v", c.addr, err)
		}
		if err := st.Identities[0].Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("backend %q: Validate() = %v, want the identity refused with %q", c.addr, err, c.want)
		}
	}
	// A removed key and a ClusterIP are addresses too.
	for _, l := range []string{
		`{"generation":2,"base":1,"identities":[],"removed":[{"vip":"10.0.0.256","port":80,"protocol":"tcp"}]}`,
		`{"generation":2,"identities":[],"clusterIPs":["10.96.0.x"]}`,
	} {
		var st State
		if err := json.Unmarshal([]byte(l), &st); err == nil {
			t.Errorf("%s: decoded to %+v, want a decoding error", l, st)
		}
	}
}
