package soak

import "testing"

// covers: D6
func TestConntrackAddrs(t *testing.T) {
	line := "udp      17 28 src=172.31.100.100 dst=172.31.100.10 sport=54310 dport=5353 src=10.77.1.3 dst=172.31.100.100 sport=8080 dport=54310 mark=0 use=1"
	dst, reply := conntrackAddrs(line)
	if dst != "172.31.100.10" || reply != "10.77.1.3" {
		t.Fatalf("conntrackAddrs = %q, %q; want the original destination and the reply's source", dst, reply)
	}
}

// covers: L6
func TestSnapshotLeaksNameEveryCountThatMoved(t *testing.T) {
	base := Snapshot{Records: 1, Routes: 2, VIPs: 1, Identities: 4, Dispatch: 4, IdentityChains: 4, OwnChains: 1, OwnSets: 2}
	if l := base.Leaks(base); len(l) != 0 {
		t.Fatalf("the same snapshot leaks %v", l)
	}
	end := base
	end.VIPs, end.EndpointChains = 2, 1
	if l := base.Leaks(end); len(l) != 2 {
		t.Fatalf("leaks %v, want the lo VIP and the ep- chain", l)
	}
	if !end.sameObjects(Snapshot{Records: 1, Routes: 2, VIPs: 2, Identities: 4, Dispatch: 4, IdentityChains: 4, OwnChains: 1, OwnSets: 2, AffinitySets: 3}) {
		t.Fatal("sameObjects must leave out the objects that follow the backends")
	}
}

// covers: L6
func TestGrowthIsALeakOnlyWithinOneLifetime(t *testing.T) {
	steady := Lifetime{Samples: []Sample{{Goroutines: 300}, {Goroutines: 220}, {Goroutines: 225}}}
	leaking := Lifetime{Samples: []Sample{{Goroutines: 220}, {Goroutines: 220}, {Goroutines: 400}}}
	if l := growth([]Lifetime{steady}); len(l) != 0 {
		t.Fatalf("a steady controller leaks %v", l)
	}
	if l := growth([]Lifetime{steady, leaking}); len(l) != 1 {
		t.Fatalf("growth = %v, want the second lifetime's goroutines", l)
	}
}

// covers: L6
func TestConfigRefusesWhatCannotRun(t *testing.T) {
	if err := (Config{Duration: -1, Gap: -1, Batch: 2000}).Validate(); err == nil {
		t.Fatal("a negative duration and gap and a batch of 2000 were accepted")
	}
	if err := (Config{Duration: 0, Batch: 10}).Validate(); err != nil {
		t.Fatal(err)
	}
}
