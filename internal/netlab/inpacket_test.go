// covers: D9 (test infrastructure for the survival tests: in-process UDP servers in a namespace, sysctl read-back)
package netlab

import (
	"context"
	"testing"
	"time"
)

// An in-process UDP server in one namespace answers an in-process client in another, and a
// sysctl set in a namespace reads back there.
func TestListenPacketInNetnsAndSysctlValue(t *testing.T) {
	l, a, b := pairLab(t, "10.250.1")
	pc, err := ListenPacketInNetns(b, "udp", "10.250.1.2:5353")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc.Close() }() // the test's own socket
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte("b:"), buf[:n]...), from)
		}
	}()
	c, err := DialInNetns(context.Background(), a, "udp", "10.250.1.2:5353")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }() // the test's own socket
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "b:hi" {
		t.Fatalf("answer %q, %v; want \"b:hi\"", buf[:n], err)
	}

	if err := l.Sysctl(a, "net.ipv4.ip_forward", "1"); err != nil {
		t.Fatal(err)
	}
	for ns, want := range map[string]string{a: "1", b: "0"} {
		if v, err := l.SysctlValue(ns, "net.ipv4.ip_forward"); err != nil || v != want {
			t.Errorf("ip_forward in %s: %q, %v; want %q", ns, v, err, want)
		}
	}
}
