package natstest

import (
	"testing"
	"time"
)

func TestServerRoundTrip(t *testing.T) {
	s := Server(t)
	nc := Connect(t, s)
	sub, err := nc.SubscribeSync("kvroute.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("kvroute.test", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "hello" {
		t.Fatalf("got %q", m.Data)
	}
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(); err != nil {
		t.Fatalf("JetStream is not enabled: %v", err)
	}
}
