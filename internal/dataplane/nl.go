package dataplane

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// nlBackend sends each transaction to the kernel as one netlink batch: github.com/google/nftables
// builds the messages, sendBatch sends them on a socket of its own. Unlike `nft -f`, it does not
// load the table first, so the cost of a transaction does not grow with the table (SPEC P1).
// The rules are the same as the text path's, expression by expression (the real-kernel tests
// compare `nft list table` of both).
type nlBackend struct {
	// conn builds the messages of a transaction and lists the table.
	conn *nftables.Conn
	// fd is a netfilter netlink socket of our own that sends the transactions (sendBatch).
	fd    int
	seq   uint32
	table *nftables.Table
	// answers is readAnswers' buffer, one for the socket: its reads are serialised as its
	// requests are.
	answers []byte
	// anon numbers the next anonymous map (see anonName). inventory raises it above the number
	// of every set already in the table that has a name of that form.
	anon uint64
	// gen is the ruleset generation after the agent's last commit; trusted says that the table
	// was whole at gen (a drift check found nothing at gen, and every commit since was the
	// agent's own, each moving the generation by exactly one). check reads nothing else while
	// the generation is still gen.
	gen     uint32
	trusted bool
	// watch, if set, is muted during large transactions (sendQuietly).
	watch *changeWatcher
	// whileMuted, if set, runs while the watcher is muted, before the batch is sent (tests).
	whileMuted func()
	// pick chooses among backends in the rules this backend writes and compares (SPEC D2).
	pick Pick
}

// quietBatch is the size from which a transaction is sent with the agent's change
// notifications muted: with a listener, the kernel builds a notification of every object a
// transaction writes, which made a cold sync of 10,000 identities 15-20% slower
// (BenchmarkP2ColdSync, docs/benchmarks.md).
const quietBatch = 1000

// sendQuietly is sendBatch, with the watcher's nftables subscription left for the time of a
// batch of quietBatch messages or more. The ruleset generation, read before the subscription is
// left and after it is joined again, tells whether anyone else committed meanwhile: if so, the
// watcher is signalled, as the lost notifications would have done.
func (b *nlBackend) sendQuietly(msgs []netlink.Message) error {
	if b.watch == nil || len(msgs) < quietBatch {
		return b.sendBatch(msgs)
	}
	before, err := b.genID()
	if err != nil {
		return err
	}
	if err := b.watch.mute(); err != nil {
		return err
	}
	if b.whileMuted != nil {
		b.whileMuted()
	}
	sendErr := b.sendBatch(msgs)
	if err := b.watch.unmute(); err != nil {
		b.watch.signal()
		return errors.Join(sendErr, err)
	}
	after, err := b.genID()
	ours := uint32(1)
	if sendErr != nil {
		ours = 0 // a refused batch does not move the generation
	}
	if err != nil || after-before != ours {
		b.watch.signal()
	}
	return sendErr
}

// socketBuffer is the send and receive buffer forced on the netlink sockets: a cold sync of
// 10,000 identities sends batches of up to ~40,000 messages (several MiB), and a rejected
// batch may get an error for each of them.
const socketBuffer = 256 << 20

// newNLBackend opens a lasting netlink socket in the calling thread's network namespace.
func newNLBackend() (*nlBackend, error) {
	if err := checkConnLayout(); err != nil {
		return nil, err
	}
	conn, err := nftables.New(nftables.AsLasting(), nftables.WithSockOptions(func(c *netlink.Conn) error {
		raw, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := raw.Control(func(fd uintptr) {
			for _, opt := range []int{unix.SO_SNDBUFFORCE, unix.SO_RCVBUFFORCE} {
				if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, socketBuffer); e != nil {
					serr = e
				}
			}
		}); err != nil {
			return err
		}
		return serr
	}))
	if err != nil {
		return nil, fmt.Errorf("opening nftables netlink socket: %w", err)
	}
	fd, err := openBatchSocket()
	if err != nil {
		_ = conn.CloseLasting()
		return nil, fmt.Errorf("opening nftables netlink socket: %w", err)
	}
	return &nlBackend{conn: conn, fd: fd, table: &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}}, nil
}

// openBatchSocket opens a blocking NETLINK_NETFILTER socket in the calling thread's network
// namespace, with large buffers and NETLINK_CAP_ACK (errors do not echo the failed message).
func openBatchSocket() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return -1, err
	}
	for _, o := range []struct{ level, opt, v int }{
		{unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, socketBuffer},
		{unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, socketBuffer},
		{unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1},
	} {
		if err := unix.SetsockoptInt(fd, o.level, o.opt, o.v); err != nil {
			_ = unix.Close(fd)
			return -1, fmt.Errorf("setsockopt %d: %w", o.opt, err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		_ = unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func (b *nlBackend) name() string { return "netlink" }

// port is the netlink port ID of the socket that sends the agent's transactions: the kernel's
// notifications of those transactions carry it (changeWatcher leaves them out).
func (b *nlBackend) port() (uint32, error) {
	sa, err := unix.Getsockname(b.fd)
	if err != nil {
		return 0, fmt.Errorf("reading the nftables socket's port: %w", err)
	}
	nl, ok := sa.(*unix.SockaddrNetlink)
	if !ok {
		return 0, fmt.Errorf("reading the nftables socket's port: address %T", sa)
	}
	return nl.Pid, nil
}

func (b *nlBackend) close() error {
	err := unix.Close(b.fd)
	return errors.Join(err, b.conn.CloseLasting())
}

// nlTxn queues messages on the connection; commit sends them as one batch. Apply calls are
// serialised, so only one nlTxn exists at a time.
type nlTxn struct {
	b   *nlBackend
	n   int
	err error
	// owners says which identity queued which messages: owners[i] owns the messages from
	// owners[i].from on, up to the next entry. The kernel names the failed messages of a batch,
	// so a refusal can be put on the identities that made them (SPEC D8).
	owners []msgOwner
	// guardDel and guardAdd are the guard's element changes by set (SPEC D9), sent at the end
	// of the transaction in messages of guardBatch elements (flushGuard): a cold sync of
	// 10,000 identities × 10 backends changes 200,000 of them, which one message each would
	// make the largest part of the batch.
	guardDel, guardAdd map[string][]nftables.SetElement
}

// guardBatch is the number of elements per guard message: an element list is one netlink
// attribute, whose length must fit in 16 bits (a reply element takes about 60 bytes).
const guardBatch = 512

func (t *nlTxn) queueGuard(add bool, set string, e nftables.SetElement) {
	m := &t.guardDel
	if add {
		m = &t.guardAdd
	}
	if *m == nil {
		*m = map[string][]nftables.SetElement{}
	}
	(*m)[set] = append((*m)[set], e)
}

// flushGuard queues the guard's element changes: all deletions before any addition, so that an
// element whose value changes is deleted and added again.
func (t *nlTxn) flushGuard() {
	if len(t.guardDel)+len(t.guardAdd) == 0 {
		return
	}
	t.identity(nil)
	for _, step := range []struct {
		m   map[string][]nftables.SetElement
		add bool
	}{{t.guardDel, false}, {t.guardAdd, true}} {
		for _, set := range []*nftables.Set{endpointSetOf(t.b.table), replyMapOf(t.b.table)} {
			elems := step.m[set.Name]
			for len(elems) > 0 {
				chunk := elems[:min(guardBatch, len(elems))]
				elems = elems[len(chunk):]
				if step.add {
					t.fail(t.b.conn.SetAddElements(set, chunk))
				} else {
					t.fail(t.b.conn.SetDeleteElements(set, chunk))
				}
			}
		}
	}
	t.guardDel, t.guardAdd = nil, nil
}

// msgOwner marks where the messages of one identity (or of none: shared objects) begin.
type msgOwner struct {
	from int
	key  gwstate.IdentityKey
	none bool
}

func (t *nlTxn) identity(id *gwstate.Identity) {
	o := msgOwner{from: len(*queuedMessages(t.b.conn)), none: id == nil}
	if id != nil {
		o.key = id.Key()
	}
	if n := len(t.owners); n > 0 && t.owners[n-1].from == o.from {
		t.owners[n-1] = o
		return
	}
	t.owners = append(t.owners, o)
}

// ownerOf is the identity that queued message i, if any.
func (t *nlTxn) ownerOf(i int) (gwstate.IdentityKey, bool) {
	j, found := slices.BinarySearchFunc(t.owners, i, func(o msgOwner, i int) int { return cmp.Compare(o.from, i) })
	if !found {
		j-- // the last mark before i
	}
	if j < 0 || t.owners[j].none {
		return gwstate.IdentityKey{}, false
	}
	return t.owners[j].key, true
}

func (b *nlBackend) begin() txn { return &nlTxn{b: b} }

// attribute turns a batch whose every failed message an identity queued into a *kernelRefusal of
// those identities; any other failure stays as it is.
func (t *nlTxn) attribute(err error) error {
	var bf *batchFailure
	if !errors.As(err, &bf) || len(bf.failed) == 0 {
		return err
	}
	reasons := map[gwstate.IdentityKey]string{}
	for _, f := range bf.failed {
		k, ok := t.ownerOf(f.index)
		if !ok {
			return err
		}
		if _, seen := reasons[k]; !seen {
			reasons[k] = fmt.Sprintf("the kernel refused identity %s: %v", k, f.err)
		}
	}
	return &kernelRefusal{reasons: reasons, err: err}
}

func (b *nlBackend) commit(_ context.Context, tx txn) error {
	t := tx.(*nlTxn)
	t.flushGuard()
	q := queuedMessages(b.conn)
	msgs := *q
	*q = nil
	// google/nftables records a message it could not serialise on the connection (Flush
	// would return it); take it, so that it fails this transaction only.
	e := connError(b.conn)
	serr := *e
	*e = nil
	if err := errors.Join(t.err, serr); err != nil {
		return err // nothing of what was queued reaches the kernel
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := b.sendQuietly(msgs); err != nil {
		b.trusted = false
		return t.attribute(err)
	}
	if b.trusted {
		// Only the agent committed since the table was found whole if this commit moved the
		// generation by one; otherwise the next check reads the table.
		g, err := b.genID()
		b.trusted = err == nil && g == b.gen+1
		b.gen = g
	}
	return nil
}

// sendBatch sends msgs to the kernel as one nfnetlink batch (one atomic transaction) and
// reports the kernel's verdict. It replaces google/nftables' Conn.Flush, which asks an ack for
// every message and reads them one receive at a time: at 40,000 messages, two syscalls and a
// goroutine (github.com/mdlayher/socket's cancellation watcher) per ack cost seconds. Here only
// the last message asks for an ack; the kernel reports every failed message anyway, and a
// failed commit on the batch's first message. The kernel processes the batch inside sendmsg,
// so every answer is queued on the socket when sendmsg returns.
func (b *nlBackend) sendBatch(msgs []netlink.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	buf, first, last := b.encodeBatch(msgs)
	if err := unix.Sendto(b.fd, buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("sending the batch (%d messages, %d bytes): %w", len(msgs), len(buf), err)
	}

	// Read every answer: errors of failed messages (or of the commit, on the first message)
	// and the ack of the last one, which comes last. Answers to an earlier batch (left over
	// when reading it failed) are skipped by their sequence numbers.
	ba := &batchAnswers{msgs: msgs, first: first, last: last, bf: &batchFailure{}}
	if err := b.readAnswers(" to the batch", ba.idle, ba.answer); err != nil {
		return err
	}
	return ba.result()
}

// encodeBatch encodes msgs between a batch's begin and end messages, only the last one asking
// for an ack. first is the sequence number of the batch's begin message, last that of its last
// message.
func (b *nlBackend) encodeBatch(msgs []netlink.Message) (buf []byte, first, last uint32) {
	size := 2 * (unix.NLMSG_HDRLEN + 4)
	for _, m := range msgs {
		size += unix.NLMSG_HDRLEN + (len(m.Data)+3)&^3
	}
	buf = make([]byte, 0, size)
	batchHdr := []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, unix.NFNL_SUBSYS_NFTABLES}
	buf, first = b.appendMessage(buf, unix.NFNL_MSG_BATCH_BEGIN, netlink.Request, batchHdr)
	for i, m := range msgs {
		flags := m.Header.Flags &^ netlink.Acknowledge
		if i == len(msgs)-1 {
			flags |= netlink.Acknowledge
		}
		buf, last = b.appendMessage(buf, uint16(m.Header.Type), flags, m.Data)
	}
	buf, _ = b.appendMessage(buf, unix.NFNL_MSG_BATCH_END, netlink.Request, batchHdr)
	return buf, first, last
}

// appendMessage appends one netlink message, padded, with the next sequence number, which it
// returns.
func (b *nlBackend) appendMessage(buf []byte, typ uint16, flags netlink.HeaderFlags, data []byte) ([]byte, uint32) {
	b.seq++
	var h [unix.NLMSG_HDRLEN]byte
	binary.NativeEndian.PutUint32(h[0:], uint32(unix.NLMSG_HDRLEN+len(data)))
	binary.NativeEndian.PutUint16(h[4:], typ)
	binary.NativeEndian.PutUint16(h[6:], uint16(flags))
	binary.NativeEndian.PutUint32(h[8:], b.seq)
	buf = append(buf, h[:]...)
	buf = append(buf, data...)
	for len(buf)%4 != 0 {
		buf = append(buf, 0)
	}
	return buf, b.seq
}

// batchAnswers collects the kernel's answers to one batch (sequence numbers after first, up to
// last).
type batchAnswers struct {
	msgs        []netlink.Message
	first, last uint32
	// errs holds the first three errors; failed counts them all.
	errs   []error
	failed int
	bf     *batchFailure
}

// idle: once a message failed, the ack of the last may never come: stop when none is queued
// (the answers are queued before sendmsg returns).
func (ba *batchAnswers) idle() bool { return ba.failed > 0 }

// answer takes one answer; done once the last message is acknowledged.
func (ba *batchAnswers) answer(typ uint16, _ uint32, body []byte) (done bool, err error) {
	if typ != unix.NLMSG_ERROR || len(body) < 4+unix.NLMSG_HDRLEN {
		return false, nil
	}
	code := int32(binary.NativeEndian.Uint32(body[0:]))
	seq := binary.NativeEndian.Uint32(body[4+8:]) // the answered message's
	if seq-ba.first > ba.last-ba.first {
		return false, nil // not this batch's
	}
	if code != 0 {
		ba.fail(seq, syscall.Errno(-code))
	}
	return seq == ba.last, nil
}

// fail records the failure of the message seq.
func (ba *batchAnswers) fail(seq uint32, errno syscall.Errno) {
	// The first errors name the cause; later messages often fail because of it.
	e := batchError(ba.msgs, ba.first, seq, errno)
	if ba.failed++; ba.failed <= 3 {
		ba.errs = append(ba.errs, e)
	}
	if i := int(seq) - int(ba.first) - 1; i >= 0 && i < len(ba.msgs) {
		ba.bf.failed = append(ba.bf.failed, failedMsg{index: i, err: e})
	} else {
		ba.bf.whole = true // the batch itself failed (its commit): no message is the cause
	}
}

// result is the batch's verdict: nil, or a *batchFailure.
func (ba *batchAnswers) result() error {
	if ba.failed > 3 {
		ba.errs = append(ba.errs, fmt.Errorf("and %d more failed messages", ba.failed-3))
	}
	if ba.failed == 0 {
		return nil
	}
	ba.bf.err = errors.Join(ba.errs...)
	if ba.bf.whole {
		ba.bf.failed = nil
	}
	return ba.bf
}

// readAnswers is the one reader of the kernel's netlink answers on the batch socket: it hands
// each message (type, sequence number, body: valid until answer returns) to answer until answer
// says done or fails. When no answer is queued it stops if stop says so (nil: never), and
// otherwise waits up to 10 s for one. what names the request in the timeout's error.
func (b *nlBackend) readAnswers(what string, stop func() bool, answer func(typ uint16, seq uint32, body []byte) (done bool, err error)) error {
	if b.answers == nil {
		b.answers = make([]byte, 1<<16)
	}
	fd, rbuf := b.fd, b.answers
	for {
		n, _, err := unix.Recvfrom(fd, rbuf, unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EAGAIN):
			if stop != nil && stop() {
				return nil
			}
			if err := waitReadable(fd, what); err != nil {
				return err
			}
			continue
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			// ENOBUFS: answers were lost; whether a batch committed is unknown.
			return fmt.Errorf("reading the kernel's answer: %w", err)
		}
		if done, err := dispatchAnswers(rbuf[:n], answer); done || err != nil {
			return err
		}
	}
}

// waitReadable waits up to 10 s for an answer on fd; what names the request in the timeout's
// error.
func waitReadable(fd int, what string) error {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if k, perr := unix.Poll(fds, 10_000); perr != nil && !errors.Is(perr, unix.EINTR) {
		return fmt.Errorf("waiting for the kernel's answer: %w", perr)
	} else if k == 0 {
		return fmt.Errorf("no answer from the kernel%s within 10s", what)
	}
	return nil
}

// dispatchAnswers hands each netlink message of d to answer until answer says done or fails.
func dispatchAnswers(d []byte, answer func(typ uint16, seq uint32, body []byte) (done bool, err error)) (done bool, err error) {
	for len(d) >= unix.NLMSG_HDRLEN {
		typ, seq, body, rest, err := splitNetlinkMessage(d, "netlink answer")
		if err != nil {
			return false, err
		}
		d = rest
		if done, err := answer(typ, seq, body); done || err != nil {
			return true, err
		}
	}
	return false, nil
}

// batchFailure is a batch the kernel refused: failed are its refused messages (by index into
// the batch's messages), empty when the batch as a whole failed.
type batchFailure struct {
	failed []failedMsg
	whole  bool
	err    error
}

type failedMsg struct {
	index int
	err   error
}

func (e *batchFailure) Error() string { return e.err.Error() }
func (e *batchFailure) Unwrap() error { return e.err }

// batchError names the message of a batch that an error answers.
func batchError(msgs []netlink.Message, first, seq uint32, errno syscall.Errno) error {
	i := int(seq) - int(first) - 1
	if i < 0 || i >= len(msgs) {
		return fmt.Errorf("transaction: %w", errno)
	}
	return fmt.Errorf("message %d of %d (%s): %w", i+1, len(msgs), msgName(uint16(msgs[i].Header.Type)&0xff), errno)
}

func msgName(t uint16) string {
	switch t {
	case unix.NFT_MSG_NEWTABLE:
		return "add table"
	case unix.NFT_MSG_NEWCHAIN:
		return "add chain"
	case unix.NFT_MSG_DELCHAIN:
		return "delete chain"
	case unix.NFT_MSG_NEWRULE:
		return "add rule"
	case unix.NFT_MSG_DELRULE:
		return "flush chain"
	case unix.NFT_MSG_NEWSET:
		return "add set"
	case unix.NFT_MSG_DELSET:
		return "delete set"
	case unix.NFT_MSG_NEWSETELEM:
		return "add element"
	case unix.NFT_MSG_DELSETELEM:
		return "delete element"
	}
	return fmt.Sprintf("message type %d", t)
}

func (t *nlTxn) size() int { return t.n }

func (t *nlTxn) chain(name string) *nftables.Chain {
	return &nftables.Chain{Name: name, Table: t.b.table}
}
func (t *nlTxn) addTable()           { t.n++; t.b.conn.AddTable(t.b.table) }
func (t *nlTxn) addChain(n string)   { t.n++; t.b.conn.AddChain(t.chain(n)) }
func (t *nlTxn) flushChain(n string) { t.n++; t.b.conn.FlushChain(t.chain(n)) }
func (t *nlTxn) deleteTable()        { t.n++; t.b.conn.DelTable(t.b.table) }
func (t *nlTxn) deleteChain(n string) {
	t.n++
	t.b.conn.DelChain(t.chain(n))
}
func (t *nlTxn) deleteSet(n string) {
	t.n++
	t.b.conn.DelSet(&nftables.Set{Table: t.b.table, Name: n})
}

func (t *nlTxn) addBaseChain(name, typ, hook, priority string) {
	t.n++
	p, err := strconv.Atoi(priority)
	if err != nil {
		t.fail(fmt.Errorf("base chain %s: priority %q: %w", name, priority, err))
		return
	}
	hooks := map[string]*nftables.ChainHook{"prerouting": nftables.ChainHookPrerouting, "postrouting": nftables.ChainHookPostrouting,
		"forward": nftables.ChainHookForward, "input": nftables.ChainHookInput}
	types := map[string]nftables.ChainType{"nat": nftables.ChainTypeNAT, "filter": nftables.ChainTypeFilter}
	h, ty := hooks[hook], types[typ]
	if h == nil || ty == "" {
		t.fail(fmt.Errorf("base chain %s: unknown type %q or hook %q", name, typ, hook))
		return
	}
	accept := nftables.ChainPolicyAccept
	t.b.conn.AddChain(&nftables.Chain{
		Name: name, Table: t.b.table, Type: ty,
		Hooknum: h, Priority: nftables.ChainPriorityRef(nftables.ChainPriority(p)), Policy: &accept,
	})
}

var serviceKeyType = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)

func (t *nlTxn) serviceMap() *nftables.Set { return serviceMapOf(t.b.table) }

// serviceMapOf, ownedSetOf and vipSetOf are the agent's named sets as it writes them.
func serviceMapOf(table *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: table, Name: ServiceMap, IsMap: true, KeyType: serviceKeyType, DataType: nftables.TypeVerdict}
}

func ownedSetOf(table *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: table, Name: OwnedSet, KeyType: serviceKeyType}
}

func vipSetOf(table *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: table, Name: VIPSet, KeyType: nftables.TypeIPAddr}
}

// endpointType is the type of EndpointSet's keys and of ReplyMap's keys and values.
var endpointType = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService)

func endpointSetOf(table *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: table, Name: EndpointSet, KeyType: endpointType}
}

func replyMapOf(table *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: table, Name: ReplyMap, IsMap: true, KeyType: endpointType, DataType: endpointType}
}

// endpointBytes is ep as a concatenation ipv4_addr . inet_service: the address, the port in
// network order, padded to 8 bytes.
func endpointBytes(ep gwstate.Backend) []byte {
	v := make([]byte, 8)
	a := ep.IP.As4()
	copy(v, a[:])
	binary.BigEndian.PutUint16(v[4:], uint16(ep.Port))
	return v
}

// parseEndpointBytes reads endpointBytes.
func parseEndpointBytes(b []byte) (gwstate.Backend, bool) {
	if len(b) != 8 {
		return gwstate.Backend{}, false
	}
	return gwstate.Backend{IP: netip.AddrFrom4([4]byte(b[:4])), Port: int32(binary.BigEndian.Uint16(b[4:6]))}, true
}

func (t *nlTxn) addGuardSets() {
	t.n += 2
	t.fail(t.b.conn.AddSet(endpointSetOf(t.b.table), nil))
	t.fail(t.b.conn.AddSet(replyMapOf(t.b.table), nil))
}

func (t *nlTxn) endpointOK(ep gwstate.Backend) bool {
	if !ep.IP.Is4() {
		t.fail(fmt.Errorf("bad endpoint %s", ep))
		return false
	}
	return true
}

func (t *nlTxn) addEndpoint(ep gwstate.Backend) {
	t.n++
	if t.endpointOK(ep) {
		t.queueGuard(true, EndpointSet, nftables.SetElement{Key: endpointBytes(ep)})
	}
}

func (t *nlTxn) deleteEndpoint(ep gwstate.Backend) {
	t.n++
	if t.endpointOK(ep) {
		t.queueGuard(false, EndpointSet, nftables.SetElement{Key: endpointBytes(ep)})
	}
}

func (t *nlTxn) addReply(ep, vip gwstate.Backend) {
	t.n++
	if t.endpointOK(ep) && t.endpointOK(vip) {
		t.queueGuard(true, ReplyMap, nftables.SetElement{Key: endpointBytes(ep), Val: endpointBytes(vip)})
	}
}

func (t *nlTxn) deleteReply(ep gwstate.Backend) {
	t.n++
	if t.endpointOK(ep) {
		t.queueGuard(false, ReplyMap, nftables.SetElement{Key: endpointBytes(ep)})
	}
}

func (t *nlTxn) addServiceMap() {
	t.n++
	t.fail(t.b.conn.AddSet(t.serviceMap(), nil))
}

func (t *nlTxn) ownedSet() *nftables.Set { return ownedSetOf(t.b.table) }

func (t *nlTxn) vipSet() *nftables.Set { return vipSetOf(t.b.table) }

func (t *nlTxn) addOwnershipSets() {
	t.n += 2
	t.fail(t.b.conn.AddSet(t.ownedSet(), nil))
	t.fail(t.b.conn.AddSet(t.vipSet(), nil))
}

func (t *nlTxn) addOwnedKey(key []string) {
	t.n++
	if k, ok := t.parseKey(key); ok {
		t.fail(t.b.conn.SetAddElements(t.ownedSet(), []nftables.SetElement{{Key: k}}))
	}
}

func (t *nlTxn) deleteOwnedKey(key []string) {
	t.n++
	if k, ok := t.parseKey(key); ok {
		t.fail(t.b.conn.SetDeleteElements(t.ownedSet(), []nftables.SetElement{{Key: k}}))
	}
}

func (t *nlTxn) vipKey(vip netip.Addr) ([]byte, bool) {
	if !vip.Is4() {
		t.fail(fmt.Errorf("bad VIP %q", vip))
		return nil, false
	}
	b := vip.As4()
	return b[:], true
}

func (t *nlTxn) addVIP(vip netip.Addr) {
	t.n++
	if k, ok := t.vipKey(vip); ok {
		t.fail(t.b.conn.SetAddElements(t.vipSet(), []nftables.SetElement{{Key: k}}))
	}
}

func (t *nlTxn) deleteVIP(vip netip.Addr) {
	t.n++
	if k, ok := t.vipKey(vip); ok {
		t.fail(t.b.conn.SetDeleteElements(t.vipSet(), []nftables.SetElement{{Key: k}}))
	}
}

// parseKey is serviceKey for a key (vip, proto, port) as listed.
func (t *nlTxn) parseKey(key []string) ([]byte, bool) {
	if len(key) != 3 {
		t.fail(fmt.Errorf("bad element key %q", key))
		return nil, false
	}
	port, err := strconv.ParseUint(key[2], 10, 16)
	a, aerr := netip.ParseAddr(key[0])
	proto, perr := uint64(0), error(nil)
	switch key[1] {
	case "tcp":
		proto = unix.IPPROTO_TCP
	case "udp":
		proto = unix.IPPROTO_UDP
	default: // listed by number (protoName): someone else's element
		proto, perr = strconv.ParseUint(key[1], 10, 8)
	}
	if err != nil || aerr != nil || perr != nil || !a.Is4() {
		t.fail(fmt.Errorf("bad element key %q", key))
		return nil, false
	}
	k := make([]byte, 12)
	a4 := a.As4()
	copy(k, a4[:])
	k[4] = byte(proto)
	binary.BigEndian.PutUint16(k[8:], uint16(port))
	return k, true
}

func (t *nlTxn) addAffinitySet(name string, timeout time.Duration) {
	t.n++
	t.fail(t.b.conn.AddSet(affinitySetOf(t.b.table, name, timeout), nil))
}

// affinitySetOf is an affinity set as the agent writes it (SPEC D3).
func affinitySetOf(table *nftables.Table, name string, timeout time.Duration) *nftables.Set {
	return &nftables.Set{Table: table, Name: name, KeyType: nftables.TypeIPAddr, Dynamic: true, HasTimeout: true, Timeout: timeout}
}

// sourceSetOf is a source set as the agent writes it (SPEC N7).
func sourceSetOf(table *nftables.Table, name string) *nftables.Set {
	return &nftables.Set{Table: table, Name: name, KeyType: nftables.TypeIPAddr, Interval: true}
}

// setSourceRanges writes the set as nft writes a named interval set of ipv4_addr (the
// real-kernel test compares both listings), with the elements of sourceElements.
func (t *nlTxn) setSourceRanges(name string, prefixes []netip.Prefix) {
	t.n += 2 + len(prefixes)
	set := sourceSetOf(t.b.table, name)
	t.fail(t.b.conn.AddSet(set, nil))
	t.b.conn.FlushSet(set)
	elems, open := sourceElements(prefixes)
	if len(elems) == 0 {
		return
	}
	t.fail(t.b.conn.SetAddElements(set, elems))
	if open {
		t.fail(patchOpenInterval(t.b.conn))
	}
}

// sourceElements are the elements of a source set of prefixes: each prefix is a start element
// and an end element (the address after its last, flagged NFT_SET_ELEM_INTERVAL_END); an end
// element at 0.0.0.0 marks the gap below the first prefix when it does not start at 0.0.0.0; a
// prefix that ends at 255.255.255.255 has no end element and says so in its user data (open
// interval, see patchOpenInterval): open reports whether there is one.
func sourceElements(prefixes []netip.Prefix) (elems []nftables.SetElement, open bool) {
	if len(prefixes) > 0 && prefixes[0].Addr() != netip.IPv4Unspecified() {
		elems = append(elems, nftables.SetElement{Key: make([]byte, 4), IntervalEnd: true})
	}
	for _, p := range prefixes {
		start := p.Addr().As4()
		last := binary.BigEndian.Uint32(start[:]) | (1<<(32-p.Bits()) - 1) // /0: 1<<32 is 0
		if last == 1<<32-1 {
			// The open flag travels as element user data, which google/nftables writes only
			// for a comment: a 3-byte comment is the 4 bytes of the flags value (1, little
			// endian, then the comment's NUL), and patchOpenInterval patches its type.
			elems = append(elems, nftables.SetElement{Key: start[:], Comment: "\x01\x00\x00"})
			open = true
			continue
		}
		elems = append(elems, nftables.SetElement{Key: start[:]},
			nftables.SetElement{Key: binary.BigEndian.AppendUint32(nil, last+1), IntervalEnd: true})
	}
	return elems, open
}

// patchOpenInterval turns the comment "\x01\x00\x00" of the last queued message's element into
// NFTNL_UDATA_SET_ELEM_FLAGS = NFTNL_SET_ELEM_F_INTERVAL_OPEN, as nft writes it.
func patchOpenInterval(c *nftables.Conn) error {
	msgs := *queuedMessages(c)
	if len(msgs) == 0 {
		return errors.New("source set: no queued message")
	}
	d := msgs[len(msgs)-1].Data
	// NFTA_SET_ELEM_USERDATA (len 10) holding one TLV: type 0 (comment), len 4, 01 00 00 00.
	pattern := []byte{10, 0, unix.NFTA_SET_ELEM_USERDATA, 0, byte(userdata.NFTNL_UDATA_SET_ELEM_COMMENT), 4, 1, 0, 0, 0}
	i := bytes.Index(d, pattern)
	if i < 0 || bytes.Contains(d[i+1:], pattern) {
		return errors.New("source set: open interval user data not found once in the NEWSETELEM message")
	}
	d[i+4] = byte(userdata.NFTNL_UDATA_SET_ELEM_FLAGS)
	return nil
}

func (t *nlTxn) fail(err error) {
	if err != nil && t.err == nil {
		t.err = err
	}
}

func (t *nlTxn) addElement(id gwstate.Identity) {
	t.n++
	t.fail(t.b.conn.SetAddElements(t.serviceMap(), []nftables.SetElement{{
		Key:         serviceKey(id.Key()),
		VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: IdentityChain(id.Key())},
	}}))
}

func (t *nlTxn) deleteElement(id gwstate.Identity) {
	t.n++
	t.fail(t.b.conn.SetDeleteElements(t.serviceMap(), []nftables.SetElement{{Key: serviceKey(id.Key())}}))
}

func (t *nlTxn) deleteElementKey(key []string) {
	t.n++
	if k, ok := t.parseKey(key); ok {
		t.fail(t.b.conn.SetDeleteElements(t.serviceMap(), []nftables.SetElement{{Key: k}}))
	}
}

// serviceKey is the concatenation ipv4_addr . inet_proto . inet_service, each part padded to
// a 4-byte register.
func serviceKey(id gwstate.IdentityKey) []byte {
	k := make([]byte, 12)
	a := id.VIP.As4()
	copy(k, a[:])
	k[4] = protoNumber(id.Protocol)
	binary.BigEndian.PutUint16(k[8:], uint16(id.Port))
	return k
}

func protoNumber(p gwstate.Protocol) byte {
	if p == gwstate.UDP {
		return unix.IPPROTO_UDP
	}
	return unix.IPPROTO_TCP
}

func protoName(n byte) string {
	switch n {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	}
	return strconv.Itoa(int(n))
}

// Registers as nft allocates them: NFT_REG_1 (16 bytes) and the 4-byte NFT_REG32_xx.
const (
	regVerdict = 0
	reg1       = 1
	reg2       = 2
	reg32_01   = 9
	reg32_02   = 10
	// NFT_REG_2 spans NFT_REG32_04..07: a 16-byte concatenation loaded from reg2 on fills
	// reg32_05..07 after it.
	reg32_05 = 13
	reg32_06 = 14
	reg32_07 = 15
)

func ifname(name string) []byte {
	b := make([]byte, 16)
	copy(b, name)
	return b
}

func (t *nlTxn) addRule(chain string, r rule) {
	t.n++
	rr, err := renderRule(t.b.table, r.withPick(t.b.pick))
	if err != nil {
		t.fail(err)
		return
	}
	if m := rr.anon; m != nil {
		if err := t.addAnonymousMap(m.set, m.elems); err != nil {
			t.fail(err)
			return
		}
		m.lookup.SetName, m.lookup.SetID = m.set.Name, m.set.ID
	}
	t.b.conn.AddRule(&nftables.Rule{Table: t.b.table, Chain: t.chain(chain), Exprs: rr.exprs, UserData: rr.udata})
	if r.kind == ruleHairpin {
		t.fail(patchCtDstIP(t.b.conn))
	}
}

// renderedRule is one rule as the netlink writer sends it: its expressions, its user data and
// the anonymous map it looks up (nil for none).
type renderedRule struct {
	exprs []expr.Any
	udata []byte
	anon  *anonMap
}

// anonMap is the anonymous map of a rendered rule: the set without name and ID (addAnonymousMap
// gives both), its elements, and the rule's lookup, which names the map once it has them.
type anonMap struct {
	set    *nftables.Set
	elems  []nftables.SetElement
	lookup *expr.Lookup
}

// renderRule renders r for the table without queuing anything: addRule sends the result, and a
// full sync compares the rules it reads back with it (nlContent, SPEC P7), so both use the same
// rendering. A marked rule's user data is RuleComment and, for a rule with an anonymous map,
// the digest of the map's elements (mapDigestData).
func renderRule(table *nftables.Table, r rule) (renderedRule, error) {
	var rr renderedRule
	var err error
	switch r.kind {
	case ruleDispatch:
		rr.exprs = dispatchExprs()
	case ruleHairpin:
		rr.exprs = hairpinExprs(r.iface)
	case ruleDNAT:
		rr.exprs, rr.anon = dnatExprs(table, r.proto, r.backends, r.pick)
	case ruleAffinityCheck:
		rr.exprs = []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Lookup{SourceRegister: reg1, SetName: r.set},
			&expr.Verdict{Kind: expr.VerdictGoto, Chain: r.chains[0]},
		}
	case ruleAffinityPick:
		rr.exprs, rr.anon = affinityPickExprs(table, r.chains, r.pick)
	case ruleAffinityUpdate:
		rr.exprs = []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Dynset{SrcRegKey: reg1, SetName: r.set, Operation: unix.NFT_DYNSET_OP_UPDATE},
		}
	case ruleGuardReply:
		rr.exprs = append(guardMatchExprs(r.iface), endpointLookup(ReplyMap, false)...)
		rr.exprs = append(rr.exprs, &expr.Verdict{Kind: expr.VerdictAccept})
	case ruleGuardDrop:
		rr.exprs = append(guardMatchExprs(""), endpointLookup(EndpointSet, false)...)
		rr.exprs = append(rr.exprs, &expr.Verdict{Kind: expr.VerdictDrop})
	case ruleReplySNAT:
		rr.exprs = append(guardMatchExprs(r.iface), endpointLookup(ReplyMap, true)...)
		rr.exprs = append(rr.exprs, &expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: reg1, RegProtoMin: reg32_01})
	case ruleFirewall:
		rr.exprs = []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Lookup{SourceRegister: reg1, SetName: r.set, Invert: true},
			&expr.Verdict{Kind: expr.VerdictDrop},
		}
	default:
		err = fmt.Errorf("unknown rule kind %d", r.kind)
	}
	if r.marked() {
		rr.udata = ruleCommentData
		if rr.anon != nil {
			rr.udata = append(slices.Clip(ruleCommentData), mapDigestData(rr.anon.elems)...)
		}
	}
	return rr, err
}

// dispatchExprs look the packet's daddr . l4proto . dport up in the service map, whose verdict
// is the identity chain.
func dispatchExprs() []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg32_01},
		&expr.Payload{DestRegister: reg32_02, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: reg1, DestRegister: regVerdict, IsDestRegSet: true, SetName: ServiceMap},
	}
}

// hairpinExprs masquerade a DNATed connection to a VIP that came in and goes out on iface.
func hairpinExprs(iface string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: ifname(iface)},
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: ifname(iface)},
		&expr.Ct{Key: expr.CtKeySTATUS, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(0x20), Xor: make([]byte, 4)}, // IPS_DST_NAT
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: make([]byte, 4)},
		// ct original ip daddr (NFT_CT_DST_IP): google/nftables sends the direction only
		// for NFT_CT_DST, so the key is patched after the rule is queued (patchCtDstIP).
		&expr.Ct{Key: expr.CtKeyDST, Direction: 0, Register: reg1},
		&expr.Lookup{SourceRegister: reg1, SetName: VIPSet},
		&expr.Masq{},
	}
}

// guardMatchExprs match a TCP segment that conntrack sees as new and that is not a SYN (SPEC D9,
// "ct state new tcp flags & syn == 0") and, unless notOut is empty, that does not leave through
// the interface notOut; in the order nft writes them.
func guardMatchExprs(notOut string) []expr.Any {
	exprs := []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitNEW), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: make([]byte, 4)},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 1, Mask: []byte{0x02}, Xor: []byte{0}}, // SYN
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{0}},
	}
	if notOut != "" {
		exprs = append(exprs,
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: ifname(notOut)})
	}
	return exprs
}

// endpointLookup looks the packet's saddr . tcp sport up in the set or map name; with value,
// the map's value (address, port) goes to registers 1 and 9.
func endpointLookup(name string, value bool) []expr.Any {
	l := &expr.Lookup{SourceRegister: reg1, SetName: name}
	if value {
		l.DestRegister, l.IsDestRegSet = reg1, true
	}
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Payload{DestRegister: reg32_01, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
		l,
	}
}

// dnatExprs DNAT packets of proto to one of backends: directly to a single one, through an
// anonymous map keyed by the pick among several.
func dnatExprs(table *nftables.Table, proto gwstate.Protocol, backends []gwstate.Backend, pick Pick) ([]expr.Any, *anonMap) {
	exprs := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{protoNumber(proto)}},
	}
	if len(backends) == 1 {
		a := backends[0].IP.As4()
		return append(exprs,
			&expr.Immediate{Register: reg1, Data: a[:]},
			&expr.Immediate{Register: reg2, Data: binaryutil.BigEndian.PutUint16(uint16(backends[0].Port))},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: reg1, RegProtoMin: reg2, Specified: true},
		), nil
	}
	set := &nftables.Set{Table: table, Anonymous: true, Constant: true, IsMap: true,
		KeyType:  nftables.TypeInteger,
		DataType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService)}
	elems := make([]nftables.SetElement, len(backends))
	for i, be := range backends {
		v := make([]byte, 8)
		a := be.IP.As4()
		copy(v, a[:])
		binary.BigEndian.PutUint16(v[4:], uint16(be.Port))
		elems[i] = nftables.SetElement{Key: binaryutil.NativeEndian.PutUint32(uint32(i)), Val: v}
	}
	lookup := &expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true}
	exprs = append(exprs, pickExprs(pick, len(backends))...)
	return append(exprs,
		lookup,
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: reg1, RegProtoMin: reg32_01},
	), &anonMap{set: set, elems: elems, lookup: lookup}
}

// affinityPickExprs go to one of chains, chosen by the pick through an anonymous verdict map.
func affinityPickExprs(table *nftables.Table, chains []string, pick Pick) ([]expr.Any, *anonMap) {
	set := &nftables.Set{Table: table, Anonymous: true, Constant: true, IsMap: true,
		KeyType: nftables.TypeInteger, DataType: nftables.TypeVerdict}
	elems := make([]nftables.SetElement, len(chains))
	for i, c := range chains {
		elems[i] = nftables.SetElement{Key: binaryutil.NativeEndian.PutUint32(uint32(i)),
			VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: c}}
	}
	lookup := &expr.Lookup{SourceRegister: reg1, DestRegister: regVerdict, IsDestRegSet: true}
	return append(pickExprs(pick, len(chains)), lookup), &anonMap{set: set, elems: elems, lookup: lookup}
}

// pickExprs put the index of the pick among n into register 1. PickHash loads saddr, sport,
// daddr and dport into four consecutive 32-bit registers (each field padded to 4 bytes, as nft
// lays out a concatenation) and hashes those 16 bytes with PickSeed; nft lists it as
// "jhash ip saddr . th sport . ip daddr . th dport mod n seed 0x76706367".
func pickExprs(pick Pick, n int) []expr.Any {
	if pick == PickRandom {
		return []expr.Any{&expr.Numgen{Register: reg1, Modulus: uint32(n), Type: unix.NFT_NG_RANDOM}}
	}
	return []expr.Any{
		&expr.Payload{DestRegister: reg2, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Payload{DestRegister: reg32_05, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
		&expr.Payload{DestRegister: reg32_06, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Payload{DestRegister: reg32_07, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Hash{SourceRegister: reg2, DestRegister: reg1, Length: 16, Modulus: uint32(n), Seed: PickSeed, Type: expr.HashTypeJenkins},
	}
}

// ruleCommentData is RuleComment as nft stores a rule's comment (NFTNL_UDATA_RULE_COMMENT, a
// NUL-terminated string).
var ruleCommentData = userdata.AppendString(nil, userdata.TypeComment, RuleComment)

// patchCtDstIP turns the "ct load dst => reg 1, dir original" of the last queued rule into
// "ct load dst_ip", which nft lists as "ct original ip daddr" (nft cannot list the former: its
// length depends on the family).
func patchCtDstIP(c *nftables.Conn) error {
	msgs := *queuedMessages(c)
	if len(msgs) == 0 {
		return errors.New("hairpin rule: no queued message")
	}
	d := msgs[len(msgs)-1].Data
	// NFTA_CT_KEY = NFT_CT_DST, NFTA_CT_DREG = 1, NFTA_CT_DIRECTION = 0, big endian.
	pattern := []byte{8, 0, unix.NFTA_CT_KEY, 0, 0, 0, 0, unix.NFT_CT_DST, 8, 0, unix.NFTA_CT_DREG, 0, 0, 0, 0, reg1, 8, 0, unix.NFTA_CT_DIRECTION, 0, 0, 0, 0, 0}
	i := bytes.Index(d, pattern)
	if i < 0 || bytes.Contains(d[i+1:], pattern) {
		return errors.New("hairpin rule: ct expression not found once in the NEWRULE message")
	}
	d[i+7] = unix.NFT_CT_DST_IP
	return nil
}

// addAnonymousMap adds an anonymous map keyed by numgen's host-endian integer. The kernel only
// compares bytes, but nft prints the keys using the key byte order recorded in the set's user
// data, and google/nftables v0.3.0 always records "big endian" for anonymous sets: `nft list`
// would show the key 1 as 16777216. nft itself records "host endian" here, so the queued
// NEWSET message is patched to say the same (the real-kernel test compares both listings).
//
// The kernel finds a set by name by walking the table's list of sets, comparing names with
// nla_strcmp (strlen, then memcmp): creating a set walks it twice and the rule's lookup once
// more, so a cold sync of 10,000 identities does ~3 × 10,000 walks over up to 10,000 sets
// (SPEC P2). The name choice keeps each step of those walks cheap:
//   - not "__map%d": for a name with %d the kernel also sscanf()s every set name of the table
//     to allocate a number;
//   - short, and different from its neighbours in the first characters (anonName), so that
//     strlen and the comparison stop after a few bytes.
//
// The NEWSETELEM message that fills the map names it by set ID only: without a name the kernel
// finds it among the transaction's new sets instead of walking the table (one walk less). The
// NEWSET message gets NLM_F_EXCL, so that a name clash fails the transaction instead of
// reusing a set (the next full sync lists the table and numbers past it). Anonymous maps are
// shown inline by `nft list`, so the name is never seen.
func (t *nlTxn) addAnonymousMap(set *nftables.Set, elems []nftables.SetElement) error {
	n := t.b.anon
	t.b.anon++
	set.ID = 1<<31 | uint32(n&0x7fffffff)
	set.Name = anonName(n)
	before := len(*queuedMessages(t.b.conn))
	if err := t.b.conn.AddSet(set, elems); err != nil {
		return err
	}
	msgs := *queuedMessages(t.b.conn)
	if len(msgs) != before+2 {
		return fmt.Errorf("anonymous map: %d messages queued, want NEWSET and NEWSETELEM", len(msgs)-before)
	}
	newset := &msgs[before]
	// NFTA_SET_USERDATA (len 10, type 13) holding one TLV: NFTNL_UDATA_SET_KEYBYTEORDER
	// (type 0, len 4) = 2 (big endian).
	pattern := []byte{10, 0, 13, 0, 0, 4, 2, 0, 0, 0}
	i := bytes.Index(newset.Data, pattern)
	if i < 0 {
		return errors.New("anonymous map: key byte order user data not found in the NEWSET message")
	}
	newset.Data[i+6] = 1 // host endian
	newset.Header.Flags |= netlink.Excl
	// NEWSETELEM: nfgenmsg (4 bytes), then NFTA_SET_ELEM_LIST_SET (the name) first.
	elem := &msgs[before+1]
	d := elem.Data
	if len(d) < 8 || binary.NativeEndian.Uint16(d[6:8]) != unix.NFTA_SET_ELEM_LIST_SET {
		return errors.New("anonymous map: set name not found first in the NEWSETELEM message")
	}
	l := (int(binary.NativeEndian.Uint16(d[4:6])) + 3) &^ 3
	if 4+l > len(d) {
		return errors.New("anonymous map: bad NEWSETELEM message")
	}
	elem.Data = append(d[:4:4], d[4+l:]...)
	return nil
}

// anonDigits are the digits of anonymous map names.
const anonDigits = "0123456789abcdefghijklmnopqrstuvwxyz"

// anonName is the name of the n-th anonymous map: "_" and n in base 36, least significant digit
// first ("_0", "_1", … "_z", "_01", "_11", …). Consecutive maps differ in their second
// character, names stay short (4 characters up to 46,656 maps), and none can be the name of an
// owned named set ("service-ips", "aff-…") or of nft's own anonymous sets ("__set%d", "__map%d").
func anonName(n uint64) string {
	b := make([]byte, 1, 14)
	b[0] = '_'
	for {
		b = append(b, anonDigits[n%36])
		n /= 36
		if n == 0 {
			return string(b)
		}
	}
}

// anonNumber is the inverse of anonName, for any name of that form (also one anonName would
// not write, like "_10"); ok is false for other names.
func anonNumber(name string) (n uint64, ok bool) {
	if len(name) < 2 || len(name) > 13 || name[0] != '_' {
		return 0, false
	}
	for i := len(name) - 1; i >= 1; i-- {
		d := strings.IndexByte(anonDigits, name[i])
		if d < 0 {
			return 0, false
		}
		n = n*36 + uint64(d)
	}
	return n, true
}

func isNotFound(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, os.ErrNotExist)
}

func (b *nlBackend) tableExists() (bool, error) {
	_, err := b.conn.ListTableOfFamily(TableName, nftables.TableFamilyIPv4)
	if err != nil {
		if isNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("getting table ip %s: %w", TableName, err)
	}
	return true, nil
}

// inventory lists the table with its content (rules, set properties): a full sync adopts the
// identities whose content is what it would write (SPEC P7).
func (b *nlBackend) inventory(context.Context) (*inventory, error) {
	return b.listTable(true)
}

// listTable lists the table's chains and sets, the elements of service-ips and of the ownership
// sets, and with content every rule of the table (one dump each, see nlContent).
func (b *nlBackend) listTable(content bool) (*inventory, error) {
	inv := &inventory{}
	ok, err := b.tableExists()
	if err != nil || !ok {
		return inv, err
	}
	c := &nlContent{b: b}
	if inv.chains, c.chains, err = b.listChains(); err != nil {
		return nil, err
	}
	if c.sets, err = b.readSets(inv); err != nil {
		return nil, err
	}
	if s, ok := c.sets[ServiceMap]; ok && s.flags&unix.NFT_SET_MAP != 0 {
		if err := b.readServiceMap(inv, ServiceMap); err != nil {
			return nil, err
		}
	}
	if content {
		if c.rules, err = b.listRules(); err != nil {
			return nil, err
		}
		inv.content = c
	}
	return inv, nil
}

// readSets lists the table's sets into inv: the ownership sets' elements, the other named sets'
// names. It returns every set's properties by name and moves b.anon past the anonymous names in
// use.
func (b *nlBackend) readSets(inv *inventory) (map[string]setInfo, error) {
	sets, err := b.listSets()
	if err != nil {
		return nil, err
	}
	out := make(map[string]setInfo, len(sets))
	for _, s := range sets {
		out[s.name] = s.setInfo
		if n, ok := anonNumber(s.name); ok && n >= b.anon {
			b.anon = n + 1 // never reuse a name that is in the table (a previous agent's maps)
		}
		switch {
		case s.flags&unix.NFT_SET_ANONYMOUS != 0:
		case s.name == ServiceMap && s.flags&unix.NFT_SET_MAP != 0: // its elements: readServiceMap
		case s.name == OwnedSet || s.name == VIPSet:
			if err := b.readOwnershipSet(inv, s.name); err != nil {
				return nil, err
			}
		case s.name == EndpointSet || s.name == ReplyMap:
			if err := b.readGuardSet(inv, s.name); err != nil {
				return nil, err
			}
		default:
			inv.sets = append(inv.sets, s.name)
		}
	}
	return out, nil
}

// readOwnershipSet reads the elements of OwnedSet (into inv.owned) or VIPSet (into inv.vips).
func (b *nlBackend) readOwnershipSet(inv *inventory, name string) error {
	elems, err := b.setElements(name)
	if err != nil {
		return err
	}
	for _, e := range elems {
		if name == VIPSet && len(e.Key) == 4 {
			inv.vips = append(inv.vips, netip.AddrFrom4([4]byte(e.Key)))
		} else if k, ok := listedKey(e.Key); ok && name == OwnedSet {
			inv.owned = append(inv.owned, k)
		}
	}
	return nil
}

// readGuardSet reads the elements of EndpointSet (into inv.endpoints) or ReplyMap (into
// inv.replies). Elements of another form are not the agent's: listed as none, the drift check
// and a full sync see the difference.
func (b *nlBackend) readGuardSet(inv *inventory, name string) error {
	elems, err := b.setElements(name)
	if err != nil {
		return err
	}
	for _, e := range elems {
		ep, ok := parseEndpointBytes(e.Key)
		if !ok {
			continue
		}
		if name == EndpointSet {
			inv.endpoints = append(inv.endpoints, ep)
		} else if vip, ok := parseEndpointBytes(e.data); ok {
			if inv.replies == nil {
				inv.replies = map[gwstate.Backend]gwstate.Backend{}
			}
			inv.replies[ep] = vip
		}
	}
	return nil
}

// readServiceMap reads the service map's elements into inv.elements.
func (b *nlBackend) readServiceMap(inv *inventory, name string) error {
	elems, err := b.setElements(name)
	if err != nil {
		return err
	}
	for _, e := range elems {
		if key, ok := listedKey(e.Key); ok {
			inv.elements = append(inv.elements, element{key: key, value: e.value})
		}
	}
	return nil
}

// listedElement is a set or map element as setElements decodes it.
type listedElement struct {
	Key   []byte
	value string // a verdict map's "goto <chain>" (or "jump <chain>", "verdict <n>")
	data  []byte // a data map's value
	flags uint32 // NFTA_SET_ELEM_FLAGS (NFT_SET_ELEM_INTERVAL_END)
	udata []byte
}

// setElements lists the elements of a named set or map of the table in one dump on the batch
// socket. (google/nftables' GetSetElements on the lasting connection was seen to return
// another dump's elements when several sets are listed in a row.)
func (b *nlBackend) setElements(name string) ([]listedElement, error) {
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: []byte(TableName + "\x00")},
		{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: []byte(name + "\x00")},
	})
	if err != nil {
		return nil, err
	}
	var out []listedElement
	err = b.request(unix.NFT_MSG_GETSETELEM, netlink.Dump, attrs, func(typ uint16, body []byte) error {
		if typ&0xff != unix.NFT_MSG_NEWSETELEM {
			return nil
		}
		ad, err := netlink.NewAttributeDecoder(body)
		if err != nil {
			return err
		}
		for ad.Next() {
			if ad.Type() != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
				continue
			}
			ad.Nested(func(list *netlink.AttributeDecoder) error {
				for list.Next() {
					var e listedElement
					list.Nested(e.decode)
					out = append(out, e)
				}
				return nil
			})
		}
		return ad.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("listing set %s: %w", name, err)
	}
	return out, nil
}

// decode fills e from the attributes of one NFTA_LIST_ELEM.
func (e *listedElement) decode(el *netlink.AttributeDecoder) error {
	for el.Next() {
		switch el.Type() {
		case unix.NFTA_SET_ELEM_KEY:
			el.Nested(func(d *netlink.AttributeDecoder) error {
				for d.Next() {
					if d.Type() == unix.NFTA_DATA_VALUE {
						e.Key = d.Bytes()
					}
				}
				return nil
			})
		case unix.NFTA_SET_ELEM_DATA:
			el.Nested(func(d *netlink.AttributeDecoder) error {
				for d.Next() {
					switch d.Type() {
					case unix.NFTA_DATA_VERDICT:
						e.value = decodeVerdict(d.Bytes())
					case unix.NFTA_DATA_VALUE:
						e.data = d.Bytes()
					}
				}
				return nil
			})
		case unix.NFTA_SET_ELEM_FLAGS:
			if f := el.Bytes(); len(f) == 4 {
				e.flags = binary.BigEndian.Uint32(f)
			}
		case unix.NFTA_SET_ELEM_USERDATA:
			e.udata = el.Bytes()
		}
	}
	return nil
}

// decodeVerdict renders NFTA_DATA_VERDICT's attributes as the inventory names verdicts.
func decodeVerdict(b []byte) string {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return ""
	}
	ad.ByteOrder = binary.BigEndian
	var code int32
	var chain string
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_VERDICT_CODE:
			code = int32(ad.Uint32())
		case unix.NFTA_VERDICT_CHAIN:
			chain = ad.String()
		}
	}
	switch code {
	case unix.NFT_GOTO:
		return "goto " + chain
	case unix.NFT_JUMP:
		return "jump " + chain
	}
	return fmt.Sprintf("verdict %d", code)
}

// listedKey is the key (vip, proto, port) of a service-ips or OwnedSet element.
func listedKey(k []byte) ([]string, bool) {
	if len(k) < 10 {
		return nil, false
	}
	return []string{netip.AddrFrom4([4]byte(k[:4])).String(), protoName(k[4]), strconv.Itoa(int(binary.BigEndian.Uint16(k[8:10])))}, true
}

// check compares the table with want (compareTable). It first asks for the ruleset's
// generation: if it is still the one at which the table was last found whole (see
// nlBackend.trusted), nothing is read. Otherwise it reads every rule of the table once (a
// dump, O(table)) and lists the table.
func (b *nlBackend) check(_ context.Context, want expectation) (string, map[gwstate.IdentityKey]bool, error) {
	gen, err := b.genID()
	if err != nil {
		return "", nil, err
	}
	if b.trusted && gen == b.gen {
		return "", nil, nil
	}
	b.trusted = false
	ok, err := b.tableExists()
	if err != nil {
		return "", nil, err
	}
	if !ok {
		return "table ip " + TableName + " is missing", nil, nil
	}
	ts := tableState{}
	if ts.rules, err = b.ruleMarks(); err != nil {
		return "", nil, err
	}
	base, err := b.conn.GetRules(b.table, &nftables.Chain{Name: BaseChain, Table: b.table})
	if err != nil && !isNotFound(err) {
		return "", nil, fmt.Errorf("listing rules of %s: %w", BaseChain, err)
	}
	ts.dispatch = len(base) == 1 && isDispatch(base[0])
	if ts.inv, err = b.listTable(false); err != nil {
		return "", nil, err
	}
	drift := compareTable(ts, want)
	if drift == "" {
		// Whole at gen (read before the listing: a commit during it moves the generation).
		b.gen, b.trusted = gen, true
		return "", nil, nil
	}
	return drift, intactIdentities(ts, want), nil
}

// isDispatch reports whether a rule is the dispatch rule (the agent's or kube-ovn's: the same
// expressions).
func isDispatch(r *nftables.Rule) bool {
	if len(r.Exprs) != 4 {
		return false
	}
	p1, ok1 := r.Exprs[0].(*expr.Payload)
	m, ok2 := r.Exprs[1].(*expr.Meta)
	p2, ok3 := r.Exprs[2].(*expr.Payload)
	l, ok4 := r.Exprs[3].(*expr.Lookup)
	return ok1 && ok2 && ok3 && ok4 &&
		p1.Base == expr.PayloadBaseNetworkHeader && p1.Offset == 16 && p1.Len == 4 &&
		m.Key == expr.MetaKeyL4PROTO &&
		p2.Base == expr.PayloadBaseTransportHeader && p2.Offset == 2 && p2.Len == 2 &&
		l.SetName == ServiceMap && l.IsDestRegSet && l.DestRegister == regVerdict
}

// genID asks the kernel for the ruleset's generation (NFT_MSG_GETGEN), which every committed
// transaction in the namespace moves by one.
func (b *nlBackend) genID() (uint32, error) {
	var id uint32
	found := false
	err := b.request(unix.NFT_MSG_GETGEN, 0, nil, func(typ uint16, attrs []byte) error {
		if typ&0xff != unix.NFT_MSG_NEWGEN {
			return nil
		}
		ad, err := netlink.NewAttributeDecoder(attrs)
		if err != nil {
			return err
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_ID {
				id, found = ad.Uint32(), true
			}
		}
		return ad.Err()
	})
	if err != nil {
		return 0, fmt.Errorf("getting the ruleset generation: %w", err)
	}
	if !found {
		return 0, errors.New("getting the ruleset generation: no NFTA_GEN_ID in the answer")
	}
	return id, nil
}

// ruleMarks reads every rule of the table in one dump and counts, per chain, the rules and
// those carrying RuleComment. Only the chain name and the user data of each rule are decoded.
func (b *nlBackend) ruleMarks() (map[string]ruleMarks, error) {
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NFTA_RULE_TABLE, Data: []byte(TableName + "\x00")}})
	if err != nil {
		return nil, err
	}
	out := map[string]ruleMarks{}
	err = b.request(unix.NFT_MSG_GETRULE, netlink.Dump, attrs, func(typ uint16, body []byte) error {
		if typ&0xff != unix.NFT_MSG_NEWRULE {
			return nil
		}
		ad, err := netlink.NewAttributeDecoder(body)
		if err != nil {
			return err
		}
		var chain string
		var marked bool
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_RULE_CHAIN:
				chain = ad.String()
			case unix.NFTA_RULE_USERDATA:
				c, ok := userdata.GetString(ad.Bytes(), userdata.TypeComment)
				marked = ok && c == RuleComment
			}
		}
		if err := ad.Err(); err != nil {
			return err
		}
		m := out[chain]
		m.rules++
		if marked {
			m.marked++
		}
		out[chain] = m
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the rules of table ip %s: %w", TableName, err)
	}
	return out, nil
}

// request sends one nftables request for family ip on the batch socket and hands each answer's
// type and attributes (after nfgenmsg) to fn, until the kernel's NLMSG_DONE (a dump) or the
// answer (otherwise). Apply and Verify are serialised, so no batch is in flight.
func (b *nlBackend) request(msgType uint16, flags netlink.HeaderFlags, attrs []byte, fn func(typ uint16, attrs []byte) error) error {
	b.seq++
	seq := b.seq
	data := append([]byte{unix.AF_INET, unix.NFNETLINK_V0, 0, 0}, attrs...)
	buf := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(data))
	binary.NativeEndian.PutUint32(buf[0:], uint32(unix.NLMSG_HDRLEN+len(data)))
	binary.NativeEndian.PutUint16(buf[4:], unix.NFNL_SUBSYS_NFTABLES<<8|msgType)
	binary.NativeEndian.PutUint16(buf[6:], uint16(netlink.Request|flags))
	binary.NativeEndian.PutUint32(buf[8:], seq)
	buf = append(buf, data...)
	if err := unix.Sendto(b.fd, buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("sending: %w", err)
	}
	dump := flags&netlink.Dump != 0
	return b.readAnswers("", nil, func(typ uint16, mseq uint32, body []byte) (bool, error) {
		if mseq != seq {
			return false, nil // an answer to an earlier batch
		}
		switch typ {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.NLMSG_ERROR:
			if len(body) >= 4 {
				if code := int32(binary.NativeEndian.Uint32(body)); code != 0 {
					return true, syscall.Errno(-code)
				}
			}
			return true, nil
		}
		if len(body) < 4 {
			return false, nil
		}
		if err := fn(typ, body[4:]); err != nil {
			return true, err
		}
		return !dump, nil
	})
}
