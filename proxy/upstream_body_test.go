package proxy

import (
	"errors"
	"io"
	"testing"
)

// TestSharedBodyHolds: a pooled body's buffer is held by its owner and
// by each reader until it is closed (once, however often Close is
// called); a reader closed reads nothing more.
func TestSharedBodyHolds(t *testing.T) {
	s := getBody()
	s.b = append(s.b, `{"messages":[]}`...)
	r1, r2 := s.reader(), s.reader()
	if n := s.refs.Load(); n != 3 {
		t.Fatalf("owner and two readers: %d holds, want 3", n)
	}
	if b, err := io.ReadAll(r1); err != nil || string(b) != `{"messages":[]}` {
		t.Fatalf("read %q, %v", b, err)
	}
	r1.Close()
	r1.Close()
	if n := s.refs.Load(); n != 2 {
		t.Fatalf("a reader closed twice: %d holds, want 2", n)
	}
	if _, err := r1.Read(make([]byte, 1)); !errors.Is(err, errBodyClosed) {
		t.Fatalf("read after close: %v, want errBodyClosed", err)
	}
	s.release()
	r2.Close()
	if n := s.refs.Load(); n != 0 {
		t.Fatalf("all released: %d holds", n)
	}
}
