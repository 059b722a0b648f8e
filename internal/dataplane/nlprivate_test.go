package dataplane

import (
	"testing"

	"github.com/google/nftables"
)

// The private fields of google/nftables that nlprivate.go reads are there, with the types it
// reads them as, and carry what the agent expects: this fails loudly on a release of the library
// that changes them (the agent then refuses to start, see newNLBackend).
// covers: D1 (the netlink path's dependency on the library's layout)
func TestConnLayout(t *testing.T) {
	if err := checkConnLayout(); err != nil {
		t.Fatal(err)
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(*queuedMessages(c)); n != 0 {
		t.Fatalf("a new Conn has %d queued messages", n)
	}
	c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName})
	c.AddChain(&nftables.Chain{Name: "x", Table: &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}})
	if n := len(*queuedMessages(c)); n != 2 {
		t.Fatalf("after two operations %d messages are queued, want 2", n)
	}
	if *connError(c) != nil {
		t.Fatalf("a Conn without a serialisation error reports %v", *connError(c))
	}
}
