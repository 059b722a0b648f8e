package lineio

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// covers: N6
// FuzzReadLine: whatever the other end of the stream sends, the reader returns the input line by
// line, each at most its bound, in order and without losing a byte, until the input ends or a
// line is over the bound, which is ErrTooLong.
func FuzzReadLine(f *testing.F) {
	for _, seed := range []string{"a\nbb\n", "", "\n\n\n", "no newline", "x\r\ny", string(make([]byte, 300)) + "\n"} {
		f.Add([]byte(seed), uint16(4))
		f.Add([]byte(seed), uint16(64))
	}
	f.Fuzz(func(t *testing.T, in []byte, bound uint16) {
		limit := int(bound%512) + 1
		r := NewReader(bytes.NewReader(in), limit)
		var got []byte
		for range len(in) + 1 {
			line, err := r.ReadLine()
			if len(line) > limit {
				t.Fatalf("a line of %d bytes over the bound %d", len(line), limit)
			}
			if n := bytes.IndexByte(line, '\n'); n >= 0 && n != len(line)-1 {
				t.Fatalf("a newline inside the line %q", line)
			}
			got = append(got, line...)
			switch {
			case errors.Is(err, ErrTooLong):
				rest := in[len(got):]
				if i := bytes.IndexByte(rest, '\n'); i >= 0 && i+1 <= limit {
					t.Fatalf("ErrTooLong for a line of %d bytes, bound %d", i+1, limit)
				}
				if !bytes.HasPrefix(in, got) {
					t.Fatal("the lines before the long one differ from the input")
				}
				return
			case errors.Is(err, io.EOF):
				if !bytes.Equal(got, in) {
					t.Fatalf("read %q, want the input %q", got, in)
				}
				return
			case err != nil:
				t.Fatalf("unexpected error %v", err)
			}
		}
		t.Fatal("more lines than bytes")
	})
}
