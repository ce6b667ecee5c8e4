package natsembed

import (
	"testing"

	"github.com/nats-io/nats.go"
)

func TestStartAndConnect(t *testing.T) {
	s, err := Start(Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := nc.JetStream()
	if _, err := js.AccountInfo(); err != nil {
		t.Fatalf("JetStream not on: %v", err)
	}
	if _, err := Start(Config{}); err == nil {
		t.Fatal("a missing store directory must be an error")
	}
}
