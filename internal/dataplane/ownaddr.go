package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// ownAddrLister knows the gateway's own IPv4 addresses: every address on every interface of its
// network namespace (eth0, net1 with kube-ovn's EIPs, lo with the held ClusterIPs).
type ownAddrLister interface {
	// refresh brings the addresses up to date; lookup then says whether a is one of them and
	// the label it carries (the interface's name unless labelled otherwise).
	refresh() error
	lookup(a netip.Addr) (label string, ok bool)
}

// rtnlAddrs keeps the namespace's IPv4 addresses from rtnetlink: one RTM_GETADDR dump, then
// the address notifications (RTNLGRP_IPV4_IFADDR) on a socket subscribed before the dump. The
// kernel queues a notification before the address change returns to whoever made it, so
// draining the socket at refresh sees every change made until then, in O(changes): a gateway
// holding 10,000 ClusterIPs on lo would otherwise pay a dump of 10,000 addresses (~20 ms with
// github.com/vishvananda/netlink) on every apply (SPEC P1). If notifications were lost (the
// socket's buffer overflowed), refresh dumps again.
type rtnlAddrs struct {
	sub    int // subscribed to RTNLGRP_IPV4_IFADDR, non-blocking
	synced bool
	addrs  map[netip.Addr]map[uint32]string // address → interface index → label
	buf    []byte
}

// addrSocketBuffer holds the notifications of a burst of address changes between two applies
// (the agent's own lo convergence adds up to one address per Service).
const addrSocketBuffer = 32 << 20

// newRtnlAddrs subscribes in the calling thread's network namespace; the first refresh dumps.
func newRtnlAddrs() (*rtnlAddrs, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening rtnetlink socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, addrSocketBuffer); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("rtnetlink socket buffer: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_IPV4_IFADDR}); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("subscribing to address changes: %w", err)
	}
	return &rtnlAddrs{sub: fd, buf: make([]byte, 1<<16)}, nil
}

func (r *rtnlAddrs) lookup(a netip.Addr) (string, bool) {
	for _, label := range r.addrs[a] {
		return label, true
	}
	return "", false
}

func (r *rtnlAddrs) refresh() error {
	if !r.synced {
		if err := r.dump(); err != nil {
			return err
		}
		r.synced = true
	}
	for {
		n, _, err := unix.Recvfrom(r.sub, r.buf, 0)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOBUFS):
			// Notifications were lost: start again from a dump (and the notifications
			// queued since, which it may already show: applying them again is harmless).
			if err := r.dump(); err != nil {
				r.synced = false
				return err
			}
			continue
		case err != nil:
			r.synced = false
			return fmt.Errorf("reading address changes: %w", err)
		}
		if _, err := r.apply(r.buf[:n], 0); err != nil {
			r.synced = false
			return err
		}
	}
}

// dump replaces the addresses with an RTM_GETADDR dump on a socket of its own.
func (r *rtnlAddrs) dump() error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("opening rtnetlink socket: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("binding rtnetlink socket: %w", err)
	}
	req := make([]byte, unix.NLMSG_HDRLEN+unix.SizeofIfAddrmsg)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.RTM_GETADDR)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], 1)
	req[unix.NLMSG_HDRLEN] = unix.AF_INET
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("listing addresses: %w", err)
	}
	r.addrs = map[netip.Addr]map[uint32]string{}
	for {
		n, _, err := unix.Recvfrom(fd, r.buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("listing addresses: %w", err)
		}
		done, err := r.apply(r.buf[:n], 1)
		if err != nil {
			return fmt.Errorf("listing addresses: %w", err)
		}
		if done {
			return nil
		}
	}
}

// apply adds (RTM_NEWADDR) and deletes (RTM_DELADDR) the IPv4 addresses in b, messages of
// sequence seq (0: notifications). It reports the end of a dump.
func (r *rtnlAddrs) apply(b []byte, seq uint32) (done bool, err error) {
	for len(b) >= unix.NLMSG_HDRLEN {
		typ, mseq, body, rest, err := splitNetlinkMessage(b, "rtnetlink message")
		if err != nil {
			return false, err
		}
		b = rest
		if seq != 0 && mseq != seq {
			continue
		}
		switch typ {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.NLMSG_ERROR:
			if err := rtnlError(body); err != nil {
				return false, err
			}
		case unix.RTM_NEWADDR, unix.RTM_DELADDR:
			r.applyAddrMessage(typ == unix.RTM_NEWADDR, body)
		}
	}
	return false, nil
}

// splitNetlinkMessage splits the first netlink message off b (at least a header long): its
// type, sequence number and body, and what follows it. kind names the message in the error.
func splitNetlinkMessage(b []byte, kind string) (typ uint16, seq uint32, body, rest []byte, err error) {
	l := int(binary.NativeEndian.Uint32(b[0:]))
	if l < unix.NLMSG_HDRLEN || l > len(b) {
		return 0, 0, nil, nil, fmt.Errorf("malformed %s (length %d of %d)", kind, l, len(b))
	}
	typ = binary.NativeEndian.Uint16(b[4:])
	seq = binary.NativeEndian.Uint32(b[8:])
	return typ, seq, b[unix.NLMSG_HDRLEN:l], b[min((l+3)&^3, len(b)):], nil
}

// rtnlError is the error an NLMSG_ERROR body reports, nil for an acknowledgement.
func rtnlError(body []byte) error {
	if len(body) >= 4 {
		if code := int32(binary.NativeEndian.Uint32(body)); code != 0 {
			return unix.Errno(-code)
		}
	}
	return nil
}

// applyAddrMessage adds (add) or deletes the IPv4 address of one RTM_NEWADDR or RTM_DELADDR
// body; other families are ignored.
func (r *rtnlAddrs) applyAddrMessage(add bool, body []byte) {
	if len(body) < unix.SizeofIfAddrmsg || body[0] != unix.AF_INET {
		return
	}
	index := binary.NativeEndian.Uint32(body[4:])
	addr, label := parseAddrAttrs(body[unix.SizeofIfAddrmsg:])
	if !addr.IsValid() {
		return
	}
	if add {
		if r.addrs[addr] == nil {
			r.addrs[addr] = map[uint32]string{}
		}
		r.addrs[addr][index] = label
	} else if m := r.addrs[addr]; m != nil {
		delete(m, index)
		if len(m) == 0 {
			delete(r.addrs, addr)
		}
	}
}

// parseAddrAttrs reads an ifaddrmsg's attributes: the address (IFA_LOCAL, else IFA_ADDRESS,
// which is the peer's on point-to-point links; invalid when neither is there) and its label.
func parseAddrAttrs(a []byte) (addr netip.Addr, label string) {
	var local, address netip.Addr
	for len(a) >= 4 {
		al := int(binary.NativeEndian.Uint16(a[0:]))
		if al < 4 || al > len(a) {
			break
		}
		at, v := binary.NativeEndian.Uint16(a[2:]), a[4:al]
		a = a[min((al+3)&^3, len(a)):]
		switch {
		case at == unix.IFA_LOCAL && len(v) == 4:
			local = netip.AddrFrom4([4]byte(v))
		case at == unix.IFA_ADDRESS && len(v) == 4:
			address = netip.AddrFrom4([4]byte(v))
		case at == unix.IFA_LABEL && len(v) > 0:
			label = string(v[:len(v)-1]) // NUL-terminated
		}
	}
	if local.IsValid() {
		return local, label
	}
	return address, label
}

// ownAddrRefusals names the identities with a backend that is one of the gateway's own
// addresses (SPEC N2): a DNAT to itself would publish the gateway's own services (kube-ovn's,
// anything listening in its namespace) on a VIP. The addresses are refreshed once, and only when
// some identity has backends; ids are valid (gwstate.Identity.Validate). An error means the
// addresses could not be read, which refuses the whole state.
func (a *Agent) ownAddrRefusals(ids []gwstate.Identity) (map[gwstate.IdentityKey]string, error) {
	if a.own == nil {
		return nil, nil
	}
	n := 0
	for _, id := range ids {
		n += len(id.Backends)
	}
	if n == 0 {
		return nil, nil
	}
	if err := a.own.refresh(); err != nil {
		return nil, fmt.Errorf("reading the gateway's own addresses: %w", err)
	}
	var out map[gwstate.IdentityKey]string
	for _, id := range ids {
		for _, b := range id.Backends {
			if label, ok := a.own.lookup(b.IP); ok {
				if out == nil {
					out = map[gwstate.IdentityKey]string{}
				}
				out[id.Key()] = fmt.Sprintf("identity %s: backend %s is an address of the gateway itself (on %s)", id.Key(), b, label)
				break
			}
		}
	}
	return out, nil
}
