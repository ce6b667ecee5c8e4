package natsembed

import (
	"os"
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

func TestOpenTemporaryStore(t *testing.T) {
	e, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.Dir); err != nil {
		t.Fatalf("store dir: %v", err)
	}
	nc, err := nats.Connect(e.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	e.Close()
	if _, err := os.Stat(e.Dir); !os.IsNotExist(err) {
		t.Errorf("temporary store %s not removed: %v", e.Dir, err)
	}
	kept := t.TempDir()
	e, err = Open(Config{StoreDir: kept})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("a given store dir must be kept: %v", err)
	}
}
