// Package lineio reads newline-terminated lines with a bound on their length, for the two ends of
// the agent stream (SPEC N6): whatever the other end sends, a reader never holds more than its
// bound of one line in memory.
package lineio

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// Bounds of the agent stream's lines.
const (
	// MaxAckLine bounds one acknowledgement from the agent: an Ack is a generation, a few
	// counters and an error text, well under a kilobyte; 1 MiB leaves room for any error.
	MaxAckLine = 1 << 20
	// MaxStateLine bounds one desired state towards the agent. A complete state of 10,000
	// identities with 10 backends each encodes to 4.0 MiB (measured by transport
	// TestMaxStateLineHoldsTheLargestState); 64 MiB leaves sixteen times that.
	MaxStateLine = 64 << 20
)

// ErrTooLong is returned (wrapped) for a line longer than the reader's bound.
var ErrTooLong = errors.New("line too long")

// Reader reads lines of at most Max bytes (the newline included).
type Reader struct {
	br  *bufio.Reader
	max int
}

// NewReader returns a Reader of lines of at most limit bytes from r.
func NewReader(r io.Reader, limit int) *Reader {
	size := 64 << 10
	if limit < size {
		size = limit
	}
	return &Reader{br: bufio.NewReaderSize(r, size), max: limit}
}

// ReadLine returns the next line, with its newline when it has one. At the end of the input it
// returns the last, unterminated line (if any) with io.EOF. A line longer than the bound is an
// error wrapping ErrTooLong, after which the Reader must not be used: the stream is out of step
// and its other end has to start over.
func (r *Reader) ReadLine() ([]byte, error) {
	var line []byte
	for {
		frag, err := r.br.ReadSlice('\n')
		if len(line)+len(frag) > r.max {
			return nil, fmt.Errorf("%w: more than %d bytes without a newline", ErrTooLong, r.max)
		}
		line = append(line, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, err
	}
}
