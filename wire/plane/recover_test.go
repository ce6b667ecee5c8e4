package plane

import (
	"bytes"
	"errors"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

func TestRecoverSubject(t *testing.T) {
	s, err := SubjectsFor("ns", "comp")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.RecoverSubject(42), "namespace.ns.component.comp.kv-recover.42"; got != want {
		t.Fatalf("RecoverSubject = %q, want %q", got, want)
	}
}

func TestRecoverRoundTrip(t *testing.T) {
	r := RecoverRequest{Worker: wire.WorkerKey{Worker: 1<<63 + 5, Dp: 7}, After: 123456789}
	msg := AppendRecoverRequest(nil, r)
	if len(msg) != RecoverRequestSize {
		t.Fatalf("request of %d bytes", len(msg))
	}
	got, err := DecodeRecoverRequest(msg)
	if err != nil || got != r {
		t.Fatalf("DecodeRecoverRequest = %+v, %v; want %+v", got, err, r)
	}
	evs := []wire.Event{{Worker: r.Worker, ID: 9, Kind: wire.KindStored, HasParent: true, Parent: 3,
		Blocks: []wire.Block{{Engine: 4, Local: 44}, {Engine: 5, Local: 55}}}}
	body := wire.AppendNative(nil, evs)
	h := RecoverReply{Kind: RecoverDump, Last: true, Chunk: 3, Worker: r.Worker, At: 99, Epoch: 0xdead}
	rep := AppendRecoverReply(nil, h, body)
	gh, gb, err := DecodeRecoverReply(rep)
	if err != nil || gh != h || !bytes.Equal(gb, body) {
		t.Fatalf("DecodeRecoverReply = %+v, %d body bytes, %v; want %+v", gh, len(gb), err, h)
	}
	var b wire.Batch
	if err := wire.DecodeNative(&b, gb); err != nil || len(b.Events) != 1 || len(b.Events[0].Blocks) != 2 {
		t.Fatalf("body: %v, %+v", err, b.Events)
	}
}

func TestRecoverMalformed(t *testing.T) {
	good := AppendRecoverRequest(nil, RecoverRequest{After: 1})
	bad := [][]byte{nil, good[:23], append(append([]byte{}, good...), 0), {'k', 'r', 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}
	for _, m := range bad {
		if _, err := DecodeRecoverRequest(m); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("DecodeRecoverRequest(% x) = %v, want ErrMalformed", m, err)
		}
	}
	rep := AppendRecoverReply(nil, RecoverReply{Kind: RecoverEvents}, nil)
	for _, mut := range []func([]byte){
		func(b []byte) { b[1] = 'r' },
		func(b []byte) { b[3] = 0 },
		func(b []byte) { b[3] = 4 },
		func(b []byte) { b[4] = 2 },
		func(b []byte) { b[7] = 1 },
	} {
		m := append([]byte{}, rep...)
		mut(m)
		if _, _, err := DecodeRecoverReply(m); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("DecodeRecoverReply(% x) = %v, want ErrMalformed", m[:8], err)
		}
	}
	if _, _, err := DecodeRecoverReply(rep[:RecoverReplyHeader-1]); !errors.Is(err, wire.ErrMalformed) {
		t.Errorf("short reply: %v", err)
	}
}

// FuzzRecoverRequest decodes arbitrary input and every prefix of it; a
// decoded request re-encodes to the same bytes.
func FuzzRecoverRequest(f *testing.F) {
	f.Add(AppendRecoverRequest(nil, RecoverRequest{Worker: wire.WorkerKey{Worker: 3, Dp: 1}, After: 17}))
	f.Add([]byte("kr"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		for i := range len(msg) + 1 {
			r, err := DecodeRecoverRequest(msg[:i])
			if err != nil {
				if !errors.Is(err, wire.ErrMalformed) {
					t.Fatalf("error %v does not wrap ErrMalformed", err)
				}
				continue
			}
			if again := AppendRecoverRequest(nil, r); !bytes.Equal(again, msg[:i]) {
				t.Fatalf("re-encoded % x, decoded from % x", again, msg[:i])
			}
		}
	})
}

// FuzzRecoverReply decodes arbitrary input and every prefix of it, with the
// body as a native batch.
func FuzzRecoverReply(f *testing.F) {
	k := wire.WorkerKey{Worker: 2}
	body := wire.AppendNative(nil, []wire.Event{{Worker: k, ID: 4, Kind: wire.KindStored, Blocks: []wire.Block{{Engine: 1, Local: 2}}}})
	f.Add(AppendRecoverReply(nil, RecoverReply{Kind: RecoverEvents, Last: true, Worker: k, At: 4, Epoch: 1}, body))
	f.Add(AppendRecoverReply(nil, RecoverReply{Kind: RecoverDump, Chunk: 1, Worker: k, At: 9}, body))
	f.Add(AppendRecoverReply(nil, RecoverReply{Kind: RecoverError, Last: true, Worker: k}, []byte("unknown dp rank 3")))
	f.Fuzz(func(t *testing.T, msg []byte) {
		var b wire.Batch
		for i := range len(msg) + 1 {
			h, body, err := DecodeRecoverReply(msg[:i])
			if err != nil {
				if !errors.Is(err, wire.ErrMalformed) {
					t.Fatalf("error %v does not wrap ErrMalformed", err)
				}
				continue
			}
			if again := AppendRecoverReply(nil, h, body); !bytes.Equal(again, msg[:i]) {
				t.Fatalf("re-encoded % x, decoded from % x", again, msg[:i])
			}
			if h.Kind != RecoverError {
				b.Reset()
				_ = wire.DecodeNative(&b, body)
			}
		}
	})
}
