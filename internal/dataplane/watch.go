package dataplane

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// changeWatcher listens to the kernel's change notifications in the agent's network namespace
// (SPEC L8): nftables (group NFNLGRP_NFTABLES) for table ip kube-ovn, and IPv4 addresses
// (RTNLGRP_IPV4_IFADDR) for lo's addresses labelled VIPLabel. It does not judge what changed: it
// says that something the agent owns may have changed, on a channel of capacity one (so any
// number of notifications coalesce into one signal), and the agent's drift check (Verify) decides
// against what it committed. Notifications of the agent's own nftables transactions (sent from
// the ports in own) do not wake it; kube-ovn's writes in the same table do, and the check finds
// them not to be drift (compareTable ignores objects that are not the agent's).
type changeWatcher struct {
	nft, rt *netlink.Conn
	own     map[uint32]bool
	loIndex uint32
	changes chan struct{}
	once    sync.Once
}

// watchBuffer is the receive buffer of the notification sockets. A cold sync of another writer
// may notify tens of thousands of objects; an overflow (ENOBUFS) only loses detail, never the
// signal: it is reported as a change.
const watchBuffer = 8 << 20

// newChangeWatcher opens the notification sockets in the calling thread's network namespace.
// own are the netlink port IDs of the agent's own nftables sockets; loIndex is lo's index.
func newChangeWatcher(own []uint32, loIndex int) (*changeWatcher, error) {
	w := &changeWatcher{own: map[uint32]bool{}, loIndex: uint32(loIndex), changes: make(chan struct{}, 1)}
	for _, p := range own {
		w.own[p] = true
	}
	var err error
	if w.nft, err = dialGroup(unix.NETLINK_NETFILTER, unix.NFNLGRP_NFTABLES); err != nil {
		return nil, fmt.Errorf("subscribing to nftables notifications: %w", err)
	}
	if w.rt, err = dialGroup(unix.NETLINK_ROUTE, unix.RTNLGRP_IPV4_IFADDR); err != nil {
		_ = w.nft.Close()
		return nil, fmt.Errorf("subscribing to address notifications: %w", err)
	}
	return w, nil
}

func dialGroup(family int, group uint32) (*netlink.Conn, error) {
	c, err := netlink.Dial(family, nil)
	if err != nil {
		return nil, err
	}
	if err := c.JoinGroup(group); err != nil {
		_ = c.Close()
		return nil, err
	}
	if err := c.SetReadBuffer(watchBuffer); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// start reads both sockets until ctx ends (then it closes them) and returns the signal
// channel. It may be called once; later calls return the same channel and start nothing.
func (w *changeWatcher) start(ctx context.Context, onError func(error)) <-chan struct{} {
	w.once.Do(func() {
		go func() {
			<-ctx.Done()
			_ = w.nft.Close()
			_ = w.rt.Close()
		}()
		go w.read(ctx, w.nft, w.nftConcerns, onError)
		go w.read(ctx, w.rt, w.addrConcerns, onError)
	})
	return w.changes
}

func (w *changeWatcher) read(ctx context.Context, c *netlink.Conn, concerns func(netlink.Message) bool, onError func(error)) {
	for {
		msgs, err := c.Receive()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if errors.Is(err, syscall.ENOBUFS) {
				w.signal() // notifications were lost: something may have changed
				continue
			}
			onError(err)
			return
		}
		for _, m := range msgs {
			if concerns(m) {
				w.signal()
				break
			}
		}
	}
}

// close closes the sockets of a watcher that was never started.
func (w *changeWatcher) close() {
	_ = w.nft.Close()
	_ = w.rt.Close()
}

// mute leaves the nftables group (see nlBackend.sendQuietly); unmute joins it again.
func (w *changeWatcher) mute() error {
	if err := w.nft.LeaveGroup(unix.NFNLGRP_NFTABLES); err != nil {
		return fmt.Errorf("leaving the nftables notifications: %w", err)
	}
	return nil
}

func (w *changeWatcher) unmute() error {
	if err := w.nft.JoinGroup(unix.NFNLGRP_NFTABLES); err != nil {
		return fmt.Errorf("joining the nftables notifications again: %w", err)
	}
	return nil
}

func (w *changeWatcher) signal() {
	select {
	case w.changes <- struct{}{}:
	default: // a signal is pending already
	}
}

func (w *changeWatcher) nftConcerns(m netlink.Message) bool {
	return nftChangeConcerns(m, w.own)
}

func (w *changeWatcher) addrConcerns(m netlink.Message) bool {
	return addrChangeConcerns(m, w.loIndex)
}

// nftChangeConcerns reports whether an nftables notification is a change to table ip
// kube-ovn that one of the ports in own did not make. Every object message (table, chain,
// rule, set, element, object, flowtable) names its table in attribute 1; the end-of-batch
// NEWGEN names none and is not a change by itself.
func nftChangeConcerns(m netlink.Message, own map[uint32]bool) bool {
	if uint16(m.Header.Type)>>8 != unix.NFNL_SUBSYS_NFTABLES || own[m.Header.PID] {
		return false
	}
	switch uint16(m.Header.Type) & 0xff {
	case unix.NFT_MSG_NEWGEN, unix.NFT_MSG_GETGEN:
		return false
	}
	// nfgenmsg: family, version, resource id (4 bytes), then attributes.
	if len(m.Data) < 4 || m.Data[0] != unix.NFPROTO_IPV4 {
		return false
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return false
	}
	for ad.Next() {
		if ad.Type() == 1 {
			return ad.String() == TableName
		}
	}
	return false
}

// addrChangeConcerns reports whether an address notification adds or removes an IPv4 address
// labelled VIPLabel on lo.
func addrChangeConcerns(m netlink.Message, loIndex uint32) bool {
	switch uint16(m.Header.Type) {
	case unix.RTM_NEWADDR, unix.RTM_DELADDR:
	default:
		return false
	}
	// ifaddrmsg: family, prefix length, flags, scope (1 byte each), interface index (4 bytes,
	// host order), then attributes.
	if len(m.Data) < unix.SizeofIfAddrmsg || m.Data[0] != unix.AF_INET || binary.NativeEndian.Uint32(m.Data[4:8]) != loIndex {
		return false
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[unix.SizeofIfAddrmsg:])
	if err != nil {
		return false
	}
	for ad.Next() {
		if ad.Type() == unix.IFA_LABEL {
			return ad.String() == VIPLabel
		}
	}
	return false
}
