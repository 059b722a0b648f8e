package dataplane

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
)

// The one place that reaches into github.com/google/nftables' private fields. The agent needs
// the messages a Conn has queued (to patch what the library cannot express, to send the batch on
// its own socket and to know which identity queued which message) and the serialisation error
// the Conn keeps for Flush; v0.3.0 exports neither. checkConnLayout runs when the netlink
// backend opens, and TestConnLayout in CI, so a release of the library that renames or retypes
// these fields fails loudly at once instead of corrupting memory. When the library offers a
// public way, this file goes.

var (
	connType     = reflect.TypeFor[nftables.Conn]()
	messagesType = reflect.TypeFor[[]netlink.Message]()
	errorType    = reflect.TypeFor[error]()
	// The fields' indexes, looked up once: the agent reads the queue once per identity.
	messagesField = fieldIndex("messages")
	errField      = fieldIndex("err")
)

// fieldIndex is the index of nftables.Conn's field name, or -1 (checkConnLayout says why).
func fieldIndex(name string) int {
	if f, ok := connType.FieldByName(name); ok && len(f.Index) == 1 {
		return f.Index[0]
	}
	return -1
}

// checkConnLayout reports whether nftables.Conn still has the private fields this file reads,
// with the types it reads them as.
func checkConnLayout() error {
	for _, f := range []struct {
		name string
		typ  reflect.Type
	}{{"messages", messagesType}, {"err", errorType}} {
		sf, ok := connType.FieldByName(f.name)
		if !ok || len(sf.Index) != 1 {
			return fmt.Errorf("github.com/google/nftables.Conn has no field %q: this build of the library is not the one the agent was written for", f.name)
		}
		if sf.Type != f.typ {
			return fmt.Errorf("github.com/google/nftables.Conn.%s is a %s, not the %s the agent reads", f.name, sf.Type, f.typ)
		}
	}
	return nil
}

// queuedMessages exposes the messages google/nftables has queued for the next Flush.
func queuedMessages(c *nftables.Conn) *[]netlink.Message {
	f := reflect.ValueOf(c).Elem().Field(messagesField)
	return (*[]netlink.Message)(unsafe.Pointer(f.UnsafeAddr()))
}

// connError exposes the serialisation error google/nftables keeps for the next Flush.
func connError(c *nftables.Conn) *error {
	f := reflect.ValueOf(c).Elem().Field(errField)
	return (*error)(unsafe.Pointer(f.UnsafeAddr()))
}
