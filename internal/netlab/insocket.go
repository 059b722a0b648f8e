package netlab

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs f on an OS thread moved into the named network namespace (/run/netns/<netns>),
// then moves the thread back. A socket f opens stays in that namespace for its whole life, so
// this is how the lab listens or dials inside a namespace without a child process.
//
// The thread must never end while locked into another namespace: Go would end the OS thread,
// and children other code of this process forked from it with Pdeathsig (the lab's
// kube-controller-manager, kube-ovn-controller, ovsdb-server) would be killed with it. So a
// thread that cannot get back blocks for ever instead.
func InNetns(netns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer func() { _ = orig.Close() }() // a namespace handle: nothing to lose on close
		target, err := os.Open(filepath.Join("/run/netns", netns))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer func() { _ = target.Close() }() // a namespace handle: nothing to lose on close
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering network namespace %s: %w", netns, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- ferr
			select {} // never seen: the thread may neither run other goroutines nor end
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// DialInNetns opens a connection from inside network namespace netns.
func DialInNetns(ctx context.Context, netns, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := InNetns(netns, func() error {
		var err error
		conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// ListenInNetns listens inside network namespace netns.
func ListenInNetns(netns, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := InNetns(netns, func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}
