// Package labout writes the reports and step lines of the dev tools (lab, bench, soak): a series
// of writes whose first error is kept, so that a report is written line after line and its error
// checked once.
package labout

import (
	"fmt"
	"io"
)

// Writer keeps the first error of a series of writes to w; once a write failed, the later ones
// are skipped.
type Writer struct {
	w   io.Writer
	err error
}

// New returns a Writer that writes to w.
func New(w io.Writer) *Writer { return &Writer{w: w} }

// Printf writes as fmt.Fprintf does, unless an earlier write failed.
func (s *Writer) Printf(format string, args ...any) {
	if s.err == nil {
		_, s.err = fmt.Fprintf(s.w, format, args...)
	}
}

// Println writes as fmt.Fprintln does, unless an earlier write failed.
func (s *Writer) Println(args ...any) {
	if s.err == nil {
		_, s.err = fmt.Fprintln(s.w, args...)
	}
}

// Write writes p unless an earlier write failed, and then returns that error: a Writer passed on
// as an io.Writer keeps the errors of the writes made through it as well.
func (s *Writer) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

// Err returns the first error of the writes so far, nil if none failed.
func (s *Writer) Err() error { return s.err }
