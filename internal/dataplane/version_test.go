// covers: O5 (the agent says which build it is, in its first acknowledgement)
package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/knftables"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/version"
)

// covers: O5
func TestServeReportsItsVersionInTheFirstAck(t *testing.T) {
	in := strings.NewReader("{\"generation\":1}\nnot json\n{\"generation\":2}\n")
	var out bytes.Buffer
	agent := NewAgent(knftables.NewFake(knftables.IPv4Family, TableName), logr.Discard())
	if err := Serve(context.Background(), agent, in, &out, ServeOptions{AgentVersion: "v1.2.3"}, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	var acks []gwstate.Ack
	var raw []string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var ack gwstate.Ack
		if err := json.Unmarshal(sc.Bytes(), &ack); err != nil {
			t.Fatalf("ack %q: %v", sc.Text(), err)
		}
		acks, raw = append(acks, ack), append(raw, sc.Text())
	}
	if len(acks) != 3 {
		t.Fatalf("got %d acks, want 3: %q", len(acks), raw)
	}
	if acks[0].AgentVersion != "v1.2.3" || acks[0].Generation != 1 || acks[0].Error != "" {
		t.Errorf("first ack %s, want generation 1 with agentVersion v1.2.3", raw[0])
	}
	for i, r := range raw[1:] {
		if strings.Contains(r, "agentVersion") {
			t.Errorf("ack %d carries the version again: %s", i+2, r)
		}
	}
}

// covers: O5
func TestAgentVersionFlag(t *testing.T) {
	var out bytes.Buffer
	if err := MainWithArgs(context.Background(), []string{"--version"}, strings.NewReader(""), &out); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "vpcgw-agent "+version.Version+"\n"; got != want {
		t.Errorf("--version printed %q, want %q", got, want)
	}
}

// covers: D2
func TestAgentRefusesAnUnknownPick(t *testing.T) {
	var out bytes.Buffer
	err := MainWithArgs(context.Background(), []string{"--pick", "maglev"}, strings.NewReader(""), &out)
	if err == nil || !strings.Contains(err.Error(), `--pick: unknown pick "maglev" (supported: hash, random)`) {
		t.Fatalf("--pick maglev: %v, want the supported picks named", err)
	}
	for _, s := range []string{"hash", "random"} {
		if p, err := ParsePick(s); err != nil || p.String() != s {
			t.Errorf("ParsePick(%q) = %v, %v", s, p, err)
		}
	}
}
