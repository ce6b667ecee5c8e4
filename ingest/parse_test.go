package ingest

import (
	"strings"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

func TestParseZMQWorker(t *testing.T) {
	ok := []struct {
		in   string
		want ZMQWorker
	}{
		{"1=tcp://127.0.0.1:5557", ZMQWorker{Worker: 1, Endpoint: "tcp://127.0.0.1:5557"}},
		{"7:2=tcp://engine-a:5559", ZMQWorker{Worker: 7, DpRank: 2, Endpoint: "tcp://engine-a:5559"}},
		{"3=tcp://h:1,model=llama-3", ZMQWorker{Worker: 3, Endpoint: "tcp://h:1", Model: "llama-3"}},
		{"3:0=tcp://h:1,replay=tcp://h:2,model=m", ZMQWorker{Worker: 3, Endpoint: "tcp://h:1", Replay: "tcp://h:2", Model: "m"}},
		{"18446744073709551615:65535=tcp://[::1]:65535", ZMQWorker{Worker: 1<<64 - 1, DpRank: wire.MaxDPRank, Endpoint: "tcp://[::1]:65535"}},
		{"4=tcp://h:9,model=a=b", ZMQWorker{Worker: 4, Endpoint: "tcp://h:9", Model: "a=b"}},
	}
	for _, c := range ok {
		got, err := ParseZMQWorker(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseZMQWorker(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%q: Validate: %v", c.in, err)
		}
		// String round-trips.
		if back, err := ParseZMQWorker(got.String()); err != nil || back != got {
			t.Errorf("round trip of %q via %q: %+v, %v", c.in, got.String(), back, err)
		}
	}

	bad := []struct{ in, says string }{
		{"", "missing '='"},
		{"tcp://h:1", "missing '='"},
		{"=tcp://h:1", `worker id ""`},
		{"0=tcp://h:1", `worker id "0"`},
		{"-1=tcp://h:1", `worker id "-1"`},
		{"x=tcp://h:1", `worker id "x"`},
		{"18446744073709551616=tcp://h:1", "worker id"},
		{"1:=tcp://h:1", `dp rank ""`},
		{"1:65536=tcp://h:1", `dp rank "65536"`},
		{"1:a=tcp://h:1", `dp rank "a"`},
		{"1=", "does not start with tcp://"},
		{"1=h:1", "does not start with tcp://"},
		{"1=ipc:///tmp/x", "does not start with tcp://"},
		{"1=tcp://h", "missing port"},
		{"1=tcp://:5557", "host to dial"},
		{"1=tcp://*:5557", "host to dial"},
		{"1=tcp://h:0", `port "0"`},
		{"1=tcp://h:70000", `port "70000"`},
		{"1=tcp://h:1,model=", "empty model"},
		{"1=tcp://h:1,model", `"model" is not key=value`},
		{"1=tcp://h:1,model=a,model=b", "model given twice"},
		{"1=tcp://h:1,replay=h:2", "replay endpoint"},
		{"1=tcp://h:1,topic=x", `unknown option "topic"`},
		{"1=tcp://h:1,", `option "" is not key=value`},
	}
	for _, c := range bad {
		_, err := ParseZMQWorker(c.in)
		if err == nil {
			t.Errorf("ParseZMQWorker(%q) accepted", c.in)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "--zmq-worker ") || !strings.Contains(msg, c.says) || !strings.Contains(msg, zmqWorkerSyntax) {
			t.Errorf("ParseZMQWorker(%q) error %q: want the flag, %q and the syntax", c.in, msg, c.says)
		}
	}
}

func TestZMQWorkerValidate(t *testing.T) {
	for _, z := range []ZMQWorker{
		{Endpoint: "tcp://h:1"},
		{Worker: 1, DpRank: wire.MaxDPRank + 1, Endpoint: "tcp://h:1"},
		{Worker: 1},
		{Worker: 1, Endpoint: "tcp://h:1", Replay: "udp://h:2"},
	} {
		if err := z.Validate(); err == nil {
			t.Errorf("%+v accepted", z)
		}
	}
	if got := (ZMQWorker{Worker: 3, Model: "m"}).Topic(); got != "kv@3@m" {
		t.Errorf("topic %q", got)
	}
	if got := (ZMQWorker{Worker: 3}).Topic(); got != "" {
		t.Errorf("topic without model %q, want every topic", got)
	}
}
