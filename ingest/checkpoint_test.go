package ingest

import (
	"errors"
	"slices"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

func trackingKeys() []SourceKey {
	return []SourceKey{
		{Source: SourceNATSNative, Worker: wire.WorkerKey{Worker: 1}, Last: 7},
		{Source: SourceNATSDynamo, Worker: wire.WorkerKey{Worker: 1 << 60, Dp: 3}, Last: 1 << 40},
		{Source: SourceNATSNative, Worker: wire.WorkerKey{Worker: 9, Dp: 1<<32 - 1}, Last: 1},
	}
}

// TestTrackingRoundTrip: what AppendTracking writes decodes to the same
// keys, and every corruption (a flipped byte anywhere, truncation, another
// version) is an ErrTracking, never a wrong answer.
func TestTrackingRoundTrip(t *testing.T) {
	keys := trackingKeys()
	b := AppendTracking([]byte("prefix"), keys)[len("prefix"):]
	got, err := DecodeTracking(b)
	if err != nil || !slices.Equal(got, keys) {
		t.Fatalf("round trip: %v, %v; want %v", got, err, keys)
	}
	if got, err := DecodeTracking(AppendTracking(nil, nil)); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v, %v", got, err)
	}
	for i := range b {
		c := slices.Clone(b)
		c[i] ^= 0x20
		if _, err := DecodeTracking(c); !errors.Is(err, ErrTracking) {
			t.Fatalf("byte %d flipped: err %v, want ErrTracking", i, err)
		}
	}
	for n := range len(b) {
		if _, err := DecodeTracking(b[:n]); !errors.Is(err, ErrTracking) {
			t.Fatalf("truncated to %d bytes: err %v, want ErrTracking", n, err)
		}
	}
}

// TestTrackingSeedsPipes: Config.Tracked seeds each NATS source's tracking
// with its own keys only, so a re-sent id is a duplicate and the next id is
// in order rather than a first sighting.
func TestTrackingSeedsPipes(t *testing.T) {
	in := &Ingest{cfg: Config{Tracked: trackingKeys()}}
	nat, dyn := newPipe(in, SourceNATSNative), newPipe(in, SourceNATSDynamo)
	k1 := wire.WorkerKey{Worker: 1}
	if v, _ := nat.tr.check(k1, 7, wire.KindStored); v != vDuplicate {
		t.Errorf("native: re-sent id 7: verdict %d, want duplicate", v)
	}
	if v, _ := nat.tr.check(k1, 8, wire.KindStored); v != vApply {
		t.Errorf("native: id 8 after 7: verdict %d, want in order", v)
	}
	if v, _ := dyn.tr.check(k1, 8, wire.KindStored); v != vFirst {
		t.Errorf("dynamo: worker 1 is not tracked there: verdict %d, want first sighting", v)
	}
	if got := dyn.tr.lastID(wire.WorkerKey{Worker: 1 << 60, Dp: 3}); got != 1<<40 {
		t.Errorf("dynamo key seeded at %d, want %d", got, uint64(1<<40))
	}
}

func FuzzDecodeTracking(f *testing.F) {
	f.Add(AppendTracking(nil, trackingKeys()))
	f.Add(AppendTracking(nil, nil))
	f.Add([]byte("KVRTRK\x01\x00\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := DecodeTracking(b)
		if err != nil {
			if !errors.Is(err, ErrTracking) {
				t.Fatalf("error %v is not an ErrTracking", err)
			}
			return
		}
		if again, err := DecodeTracking(AppendTracking(nil, keys)); err != nil || !slices.Equal(again, keys) {
			t.Fatalf("re-encoding %v gives %v, %v", keys, again, err)
		}
	})
}
