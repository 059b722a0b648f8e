// covers: V3, O1 (the environment of the data-path tests: OVN central, a chassis, namespaces, TCP)
package ovsnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/ovsbuild"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// env is one OVN central (NB, SB, northd) with one chassis and a namespace lab, all private to
// the test: two test runs at once do not meet.
type env struct {
	ovn *kubeovnrun.OVN
	ch  *Chassis
	lab *netlab.Lab
}

// startEnv starts OVN central and a chassis for node; with premade, an SB chassis
// "chassis-<node>" holding encap geneve 127.0.0.1 is made first, as kubeovnrun.AddNode makes it.
func startEnv(t *testing.T, node string, premade bool) *env {
	t.Helper()
	if err := Available(); err != nil {
		testutil.Skip(t, "no OVS chassis here: "+err.Error())
	}
	schemas, which := schemaDir(t)
	dir, err := os.MkdirTemp("", "ovsn")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{}
	t.Cleanup(func() {
		if e.ch != nil {
			if t.Failed() {
				t.Logf("chassis diagnostics:\n%s", e.ch.Diagnostics(context.Background()))
			}
			if err := e.ch.Stop(); err != nil {
				t.Errorf("stopping the chassis: %v", err)
			}
		}
		e.ovn.Stop()
		if e.lab != nil {
			if err := e.lab.Cleanup(); err != nil {
				t.Errorf("cleaning up namespaces: %v", err)
			}
		}
		_ = os.RemoveAll(dir)
	})
	begin := time.Now()
	if err := os.MkdirAll(filepath.Join(dir, "c"), 0o700); err != nil {
		t.Fatal(err)
	}
	if e.ovn, err = kubeovnrun.StartOVN(filepath.Join(dir, "c"), schemas); err != nil {
		t.Fatal(err)
	}
	t.Logf("OVN central up on %s schemas (%s)", which, time.Since(begin).Round(time.Millisecond))
	if premade {
		if _, err := e.ovn.SBCtl("chassis-add", kubeovnrun.ChassisName(node), "geneve", "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	if e.lab, err = netlab.New("on"); err != nil {
		t.Fatal(err)
	}
	e.ch, err = Start(t.Context(), Options{
		Dir: filepath.Join(dir, "n"), Node: node, SBAddr: e.ovn.SBAddr(), TakeOverEncap: true,
		Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// schemaDir returns a directory with the NB and SB schemas in kubeovnrun's file names: kube-ovn
// v1.16.2's (what the lab runs) when VPCGW_KUBEOVN has them, else the OVN build's own.
func schemaDir(t *testing.T) (dir, which string) {
	if dir, missing := testutil.KubeOVNAssets(kubeovnrun.NBSchemaFile, kubeovnrun.SBSchemaFile); missing == "" {
		return dir, "kube-ovn v1.16.2's"
	}
	dir = t.TempDir()
	for file, name := range map[string]string{
		kubeovnrun.NBSchemaFile: "ovn-nb.ovsschema",
		kubeovnrun.SBSchemaFile: "ovn-sb.ovsschema",
	} {
		src, err := ovsbuild.Schema(name)
		if err != nil {
			testutil.Skip(t, "no OVN schema: neither VPCGW_KUBEOVN nor the OVN build has "+name+": "+err.Error())
		}
		if err := os.Symlink(src, filepath.Join(dir, file)); err != nil {
			t.Fatal(err)
		}
	}
	return dir, "the OVN build's"
}

func (e *env) nbctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.ovn.NBCtl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

func (e *env) sbctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.ovn.SBCtl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

func (e *env) netns(t *testing.T, short string) string {
	t.Helper()
	ns, err := e.lab.AddNetns(short)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// containerID is a random sandbox ID, 64 hex characters as containerd's.
func containerID(t *testing.T) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// server answers every TCP connection with its name and counts them.
type server struct {
	name     string
	accepted atomic.Int64
}

// serve listens on addr (ip:port) in ns until the test ends.
func serve(t *testing.T, ns, addr, name string) *server {
	t.Helper()
	var ln net.Listener
	if err := netlab.InNetns(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	s := &server{name: name}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.WriteString(c, name+"\n")
			_ = c.Close()
		}
	}()
	return s
}

// request connects from ns to addr and returns what the server answered.
func request(ns, addr string, timeout time.Duration) (string, error) {
	var conn net.Conn
	if err := netlab.InNetns(ns, func() (err error) { conn, err = net.DialTimeout("tcp", addr, timeout); return err }); err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	b, err := io.ReadAll(conn)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// expectAnswer fails unless a request from ns to addr is answered by want.
func expectAnswer(t *testing.T, ns, addr, want string) {
	t.Helper()
	got, err := request(ns, addr, 2*time.Second)
	if err != nil || got != want {
		t.Fatalf("request from %s to %s: got %q, %v; want %q", ns, addr, got, err, want)
	}
}

// expectNothing sends n requests from ns to addr and fails if any is answered or if s accepted
// a connection meanwhile: the packets were not delivered.
func expectNothing(t *testing.T, ns, addr string, s *server, n int) {
	t.Helper()
	before := s.accepted.Load()
	for i := 0; i < n; i++ {
		if got, err := request(ns, addr, 500*time.Millisecond); err == nil {
			t.Fatalf("request %d from %s to %s was answered %q; want nothing delivered", i, ns, addr, got)
		}
	}
	if d := s.accepted.Load() - before; d != 0 {
		t.Fatalf("%s accepted %d connections to %s; want none delivered", s.name, d, addr)
	}
}

// eventually polls cond every 20 ms until it returns nil or timeout passes; it returns how long
// that took.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	begin := time.Now()
	for {
		err := cond()
		if err == nil {
			return time.Since(begin)
		}
		if time.Since(begin) > timeout {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
