package sched

import (
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
)

// FuzzOps interprets the input as a sequence of scheduler operations (add,
// remove and report workers; route batches with overlaps, pins and allowed
// lists; book, prefill-done, free, tick) under a configuration taken from the
// first bytes, and checks every invariant after each operation. Ids, worker
// keys and prompt prefixes come from small sets, so duplicates, unknown ids,
// shared blocks and busy workers are frequent.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{1, 1, 2, 1, 0, 1, 0, 0, 2, 1, 3, 3, 2, 4, 0, 5, 9, 9, 3, 2, 1, 6, 0, 0})
	f.Add([]byte{2, 0, 1, 3, 0, 0, 1, 0, 1, 1, 3, 0, 0, 3, 1, 1, 3, 2, 2, 3, 3, 3, 8, 1, 7, 1, 1})
	f.Add([]byte{3, 1, 0, 2, 0, 3, 0, 0, 7, 0, 0, 3, 4, 4, 3, 5, 5, 5, 1, 0, 4, 2, 2, 9, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		cfg := testConfig()
		cfg.BlockSize = 4
		cfg.Policy = Policy(data[0] % 4)
		cfg.AssumeKVReuse = data[1]%2 == 0
		cfg.QueuePolicy = QueuePolicy(data[2] % 3)
		cfg.QueueDepth = int(data[3] % 4)
		cfg.Expiry = 20 * time.Second
		cfg.BusyPrefillTokens = 40
		cfg.Temperature = float64(data[1]%3) / 2
		cfg.CreditCost = data[2]%2 == 1
		cfg.ChainedHashes = data[3]/4%2 == 1 // the lists are chained (chain below)
		s, err := New(cfg, uint64(data[0]))
		if err != nil {
			t.Fatal(err)
		}
		data = data[4:]
		key := func(b byte) wire.WorkerKey { return wire.WorkerKey{Worker: uint64(b%4) + 1, Dp: uint32(b/4) % 2} }
		chain := func(fam, n byte) []wire.SeqHash {
			hs := make([]wire.SeqHash, int(n%6))
			for i := range hs {
				hs[i] = wire.SeqHash(uint64(fam%3)<<32 | uint64(i+1))
			}
			return hs
		}
		var now int64
		var effs []Effect
		for len(data) >= 3 {
			op, a, b := data[0], data[1], data[2]
			data = data[3:]
			now += int64(op/16) * int64(time.Second)
			switch op % 10 {
			case 0:
				s.AddWorker(key(a), Capacity{TotalBlocks: uint64(b % 16), MaxBatchedTokens: uint64(b)})
			case 1:
				s.RemoveRank(key(a), now)
			case 2:
				s.RemoveWorker(uint64(a%4)+1, now)
			case 3:
				_ = s.ReportLoad(key(a), Load{UsedBlocks: uint64(b % 20)}, now)
			case 4, 5:
				r := Request{ID: uint64(a % 16), ISL: uint32(b % 24), Blocks: chain(a, b), ExpectedPrefill: time.Duration(b%3) * time.Second}
				switch b % 5 {
				case 0:
					r.Override.Pinned, r.Override.PinnedSet = key(b), true
				case 1:
					r.Override.Allowed = []wire.WorkerKey{key(a), key(b)}
				case 2:
					r.Override.Weight, r.Override.WeightSet = float64(b%4), true
				}
				ov := []Overlap{{Worker: key(b), Device: uint32(a % 5), Host: uint32(b % 3), Disk: uint32(a % 2), TreeSize: uint32(b)}}
				if op%2 == 0 {
					s.Decide(nil, []Request{r, {ID: uint64(b % 16), ISL: 8, Blocks: chain(b, 2)}}, [][]Overlap{ov, nil}, now)
				} else {
					s.DecideExplained(nil, &r, ov, now)
				}
			case 6:
				_ = s.AddRequest(uint64(a%16), key(b), chain(b, a), uint32(a), uint32(b%3), PrefillLoadHint{InitialEffectiveTokens: uint32(b % 30), ExpectedDuration: time.Duration(a%3) * time.Second}, now)
			case 7:
				s.MarkPrefillCompleted(uint64(a%16), now)
			case 8:
				s.Free(uint64(a%16), now)
			case 9:
				s.Tick(now)
				s.AppendLoads(nil, chain(a, b), now)
			}
			if err := s.CheckInvariants(); err != nil {
				t.Fatalf("after op %d(%d, %d): %v", op%10, a, b, err)
			}
			effs = s.Drain(effs[:0])
			for _, e := range effs {
				if e.Kind == EffectAllWorkersBusy && !s.Throttled(e.At) {
					t.Fatalf("AllWorkersBusy at %d without the latch", e.At)
				}
			}
		}
	})
}
