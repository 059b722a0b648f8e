package dataplane

import (
	"encoding/binary"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

func nftNotification(t *testing.T, msg uint16, family byte, pid uint32, table string) netlink.Message {
	t.Helper()
	var attrs []byte
	if table != "" {
		var err error
		if attrs, err = netlink.MarshalAttributes([]netlink.Attribute{{Type: 1, Data: append([]byte(table), 0)}}); err != nil {
			t.Fatal(err)
		}
	}
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | msg), PID: pid},
		Data:   append([]byte{family, 0, 0, 0}, attrs...),
	}
}

func addrNotification(t *testing.T, msg uint16, family byte, index uint32, label string) netlink.Message {
	t.Helper()
	hdr := make([]byte, unix.SizeofIfAddrmsg)
	hdr[0], hdr[1] = family, 32
	binary.NativeEndian.PutUint32(hdr[4:], index)
	var attrs []byte
	if label != "" {
		var err error
		if attrs, err = netlink.MarshalAttributes([]netlink.Attribute{
			{Type: unix.IFA_LOCAL, Data: []byte{10, 96, 0, 10}},
			{Type: unix.IFA_LABEL, Data: append([]byte(label), 0)},
		}); err != nil {
			t.Fatal(err)
		}
	}
	return netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(msg)}, Data: append(hdr, attrs...)}
}

// The watcher wakes the agent for changes to table ip kube-ovn made by anyone but the agent's
// own socket, and for lo's labelled addresses; nothing else (SPEC L8).
// covers: L8
func TestChangeNotificationsThatConcernTheAgent(t *testing.T) {
	own := map[uint32]bool{4242: true}
	for _, c := range []struct {
		name string
		m    netlink.Message
		want bool
	}{
		{"kube-ovn adds an element", nftNotification(t, unix.NFT_MSG_NEWSETELEM, unix.NFPROTO_IPV4, 77, TableName), true},
		{"a chain deleted by hand", nftNotification(t, unix.NFT_MSG_DELCHAIN, unix.NFPROTO_IPV4, 0, TableName), true},
		{"the table deleted", nftNotification(t, unix.NFT_MSG_DELTABLE, unix.NFPROTO_IPV4, 9, TableName), true},
		{"a rule deleted", nftNotification(t, unix.NFT_MSG_DELRULE, unix.NFPROTO_IPV4, 9, TableName), true},
		{"the agent's own commit", nftNotification(t, unix.NFT_MSG_NEWRULE, unix.NFPROTO_IPV4, 4242, TableName), false},
		{"another table", nftNotification(t, unix.NFT_MSG_NEWRULE, unix.NFPROTO_IPV4, 9, "filter"), false},
		{"table kube-ovn of family inet", nftNotification(t, unix.NFT_MSG_NEWRULE, unix.NFPROTO_INET, 9, TableName), false},
		{"the end of a batch", nftNotification(t, unix.NFT_MSG_NEWGEN, unix.NFPROTO_UNSPEC, 9, ""), false},
		{"no table named", nftNotification(t, unix.NFT_MSG_NEWRULE, unix.NFPROTO_IPV4, 9, ""), false},
		{"another subsystem", netlink.Message{Header: netlink.Header{Type: 1<<8 | 1}, Data: []byte{2, 0, 0, 0}}, false},
		{"truncated", netlink.Message{Header: netlink.Header{Type: unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWRULE}, Data: []byte{2}}, false},
	} {
		if got := nftChangeConcerns(c.m, own); got != c.want {
			t.Errorf("nftables: %s: %v, want %v", c.name, got, c.want)
		}
	}
	for _, c := range []struct {
		name string
		m    netlink.Message
		want bool
	}{
		{"a VIP removed from lo", addrNotification(t, unix.RTM_DELADDR, unix.AF_INET, 1, VIPLabel), true},
		{"a VIP added to lo", addrNotification(t, unix.RTM_NEWADDR, unix.AF_INET, 1, VIPLabel), true},
		{"lo's own address", addrNotification(t, unix.RTM_DELADDR, unix.AF_INET, 1, "lo"), false},
		{"another interface", addrNotification(t, unix.RTM_DELADDR, unix.AF_INET, 3, VIPLabel), false},
		{"IPv6", addrNotification(t, unix.RTM_DELADDR, unix.AF_INET6, 1, VIPLabel), false},
		{"no label", addrNotification(t, unix.RTM_DELADDR, unix.AF_INET, 1, ""), false},
		{"a route", netlink.Message{Header: netlink.Header{Type: unix.RTM_NEWROUTE}, Data: make([]byte, 12)}, false},
		{"truncated", netlink.Message{Header: netlink.Header{Type: unix.RTM_DELADDR}, Data: []byte{2, 32}}, false},
	} {
		if got := addrChangeConcerns(c.m, 1); got != c.want {
			t.Errorf("addresses: %s: %v, want %v", c.name, got, c.want)
		}
	}
}
