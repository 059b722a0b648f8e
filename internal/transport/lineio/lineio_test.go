// covers: N6 (stream lines are read with a bound)
package lineio

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// endless is a writer's output that never ends and never has a newline.
type endless struct{ n int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	e.n += int64(len(p))
	return len(p), nil
}

// covers: N6
func TestReadLineStopsAtTheBound(t *testing.T) {
	src := &endless{}
	r := NewReader(src, 1<<20)
	_, err := r.ReadLine()
	if !errors.Is(err, ErrTooLong) {
		t.Fatalf("ReadLine of an endless line: %v, want ErrTooLong", err)
	}
	// It read about the bound and stopped: never more than the bound plus one buffer.
	if src.n > 1<<20+64<<10 {
		t.Fatalf("read %d bytes of an endless line with a bound of %d", src.n, 1<<20)
	}
}

// covers: N6
func TestReadLineLinesUpToTheBound(t *testing.T) {
	const maxLine = 100
	long := strings.Repeat("a", maxLine-1) + "\n" // exactly max with its newline
	r := NewReader(strings.NewReader("one\n"+long+"last"), maxLine)
	for _, want := range []string{"one\n", long} {
		got, err := r.ReadLine()
		if err != nil || string(got) != want {
			t.Fatalf("ReadLine = %q, %v; want %q", got, err, want)
		}
	}
	got, err := r.ReadLine()
	if !errors.Is(err, io.EOF) || string(got) != "last" {
		t.Fatalf("last line = %q, %v; want \"last\", EOF", got, err)
	}
	if _, err := NewReader(strings.NewReader(strings.Repeat("a", maxLine)+"\n"), maxLine).ReadLine(); !errors.Is(err, ErrTooLong) {
		t.Fatalf("a line of max+1 bytes: %v, want ErrTooLong", err)
	}
}
