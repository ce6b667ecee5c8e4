package handover

import (
	"errors"
	"net"
	"testing"
	"time"
)

// Two views in turn on one port: the first takes a connection, is closed
// (its Accept fails, the port stays open), the last takes the next; closing
// it closes the port.
func TestViewsTakeTurns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Share(ln)
	first, second := l.View(), l.Last()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	dial()
	c, err := first.Accept()
	if err != nil {
		t.Fatalf("first view: %v", err)
	}
	_ = c.Close()
	_ = first.Close()
	if _, err := first.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("closed view's Accept: %v, want net.ErrClosed", err)
	}
	dial() // the port is still open
	c, err = second.Accept()
	if err != nil {
		t.Fatalf("second view: %v", err)
	}
	_ = c.Close()
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := second.Accept(); err == nil {
		t.Fatal("Accept after Close succeeded")
	}
	if _, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
		t.Fatal("the port still accepts after Close")
	}
}
