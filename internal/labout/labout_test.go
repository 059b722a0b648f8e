package labout

import (
	"errors"
	"strings"
	"testing"
)

type failAfter struct {
	n   int
	buf strings.Builder
}

var errFull = errors.New("full")

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errFull
	}
	f.n--
	return f.buf.Write(p)
}

// covers: L6, V1 (the soak, bench and lab reports: a failed write is reported once, nothing after it is lost silently)
func TestWriterKeepsFirstError(t *testing.T) {
	f := &failAfter{n: 2}
	w := New(f)
	w.Printf("a %d\n", 1)
	w.Println("b", 2)
	if w.Err() != nil {
		t.Fatalf("err = %v before the writer failed", w.Err())
	}
	w.Println("c")
	w.Printf("d\n")
	if _, err := w.Write([]byte("e\n")); !errors.Is(err, errFull) {
		t.Fatalf("Write after a failure: err = %v", err)
	}
	if !errors.Is(w.Err(), errFull) {
		t.Fatalf("err = %v, want %v", w.Err(), errFull)
	}
	if got := f.buf.String(); got != "a 1\nb 2\n" {
		t.Fatalf("written %q", got)
	}
}
