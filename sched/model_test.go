package sched

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
)

// model is a naive re-statement of the scheduler's accounting (maps and
// sets, recomputed from scratch) that TestModel checks the real one against.
type model struct {
	bs        int64
	workers   map[wire.WorkerKey]Capacity
	used      map[wire.WorkerKey]uint64
	reqs      map[uint64]*modelReq
	queued    map[uint64]bool
	cfg       Config
	expiries  int
	cancelled int
	qblocks   map[uint64][]wire.SeqHash
}

type modelReq struct {
	worker wire.WorkerKey
	blocks []wire.SeqHash
	pf     int64
	start  int64
}

func (m *model) active(k wire.WorkerKey) int64 {
	set := map[wire.SeqHash]bool{}
	for _, r := range m.reqs {
		if r.worker == k {
			for _, h := range r.blocks {
				set[h] = true
			}
		}
	}
	return int64(len(set))
}

func (m *model) prefill(k wire.WorkerKey) int64 {
	var sum int64
	for _, r := range m.reqs {
		if r.worker == k {
			sum += r.pf
		}
	}
	return sum
}

func (m *model) held(k wire.WorkerKey, blocks []wire.SeqHash) int64 {
	set := map[wire.SeqHash]bool{}
	for _, r := range m.reqs {
		if r.worker == k {
			for _, h := range r.blocks {
				set[h] = true
			}
		}
	}
	var n int64
	for _, h := range blocks {
		if !set[h] {
			break // chained hashes: nothing after a miss is held
		}
		n++
	}
	return n
}

func (m *model) rankBusy(k wire.WorkerKey) bool {
	c := m.workers[k]
	dec := max(m.active(k), int64(m.used[k]))
	if m.cfg.BusyDecodeFrac > 0 && c.TotalBlocks > 0 && float64(dec) > m.cfg.BusyDecodeFrac*float64(c.TotalBlocks) {
		return true
	}
	return m.cfg.BusyPrefillTokens > 0 && m.prefill(k) > m.cfg.BusyPrefillTokens
}

func (m *model) workerBusy(id uint64) bool {
	for k := range m.workers {
		if k.Worker == id && !m.rankBusy(k) {
			return false
		}
	}
	return true
}

func (m *model) eligible(r *Request, k wire.WorkerKey) bool {
	if r.Override.PinnedSet {
		return k == r.Override.Pinned
	}
	if len(r.Override.Allowed) == 0 {
		return true
	}
	for _, a := range r.Override.Allowed {
		if a == k {
			return true
		}
	}
	return false
}

// costs returns the cost of every candidate for r (default form, weight 1).
func (m *model) costs(r *Request, ov []Overlap) (map[wire.WorkerKey]float64, int) {
	out := map[wire.WorkerKey]float64{}
	eligible := 0
	for k := range m.workers {
		if !m.eligible(r, k) {
			continue
		}
		eligible++
		if m.workerBusy(k.Worker) {
			continue
		}
		var dev int64
		for _, o := range ov {
			if o.Worker == k {
				dev = int64(o.Device)
			}
		}
		pf := float64(m.prefill(k)+max(0, int64(r.ISL)-dev*m.bs)) / float64(m.bs)
		dec := float64(m.active(k) + int64(len(r.Blocks)) - m.held(k, r.Blocks))
		out[k] = pf + dec
	}
	return out, eligible
}

func (m *model) book(id uint64, d Decision, r *Request, now int64) {
	m.reqs[id] = &modelReq{worker: d.Worker, blocks: append([]wire.SeqHash(nil), r.Blocks...), pf: int64(d.PrefillTokens), start: now}
}

// TestModel drives the scheduler with random operations and checks, after
// each, the per-rank active blocks and prefill tokens against the model, that
// every routed request went to a cheapest non-busy eligible rank, that waits
// and rejections happen exactly when the model says so, and CheckInvariants.
func TestModel(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		testModel(t, seed, 400)
	}
}

func testModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 42))
	cfg := testConfig()
	cfg.BlockSize = 4
	cfg.QueueDepth = 3
	cfg.Expiry = 50 * time.Second
	cfg.BusyPrefillTokens = 60
	cfg.ChainedHashes = seed%2 == 0 // the lists are chained (chain below)
	s, err := New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	m := &model{bs: 4, cfg: cfg, workers: map[wire.WorkerKey]Capacity{}, used: map[wire.WorkerKey]uint64{}, reqs: map[uint64]*modelReq{}, queued: map[uint64]bool{}, qblocks: map[uint64][]wire.SeqHash{}}
	// pick returns a random active id (in id order, so runs repeat).
	pick := func() (uint64, bool) {
		if len(m.reqs) == 0 {
			return 0, false
		}
		ids := make([]uint64, 0, len(m.reqs))
		for id := range m.reqs {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return ids[rng.IntN(len(ids))], true
	}
	// A few prompt families sharing prefixes: family f, length n → the
	// first n hashes of chain f.
	chain := func(f, n int) []wire.SeqHash {
		hs := make([]wire.SeqHash, n)
		for i := range hs {
			hs[i] = wire.SeqHash(uint64(f)<<32 | uint64(i+1))
		}
		return hs
	}
	var now int64
	nextID := uint64(0)
	keys := func() []wire.WorkerKey {
		var ks []wire.WorkerKey
		for w := uint64(1); w <= 4; w++ {
			for dp := uint32(0); dp < 2; dp++ {
				ks = append(ks, wire.WorkerKey{Worker: w, Dp: dp})
			}
		}
		return ks
	}()
	apply := func(effs []Effect) {
		for _, e := range effs {
			switch e.Kind {
			case EffectAdmitted:
				if !m.queued[e.ID] {
					t.Fatalf("seed %d: admitted %d was not waiting", seed, e.ID)
				}
				delete(m.queued, e.ID)
				m.reqs[e.ID] = &modelReq{worker: e.Decision.Worker, pf: int64(e.Decision.PrefillTokens), start: e.At}
				m.reqs[e.ID].blocks = m.qblocks[e.ID]
			case EffectRejected:
				delete(m.queued, e.ID)
			case EffectExpired:
				r, ok := m.reqs[e.ID]
				if !ok || now-r.start <= int64(cfg.Expiry) {
					t.Fatalf("seed %d: bad expiry of %d", seed, e.ID)
				}
				delete(m.reqs, e.ID)
				m.expiries++
			}
		}
	}
	for step := 0; step < steps; step++ {
		now += int64(rng.IntN(3)) * int64(time.Second)
		switch op := rng.IntN(12); {
		case op == 0: // add or resize a rank
			k := keys[rng.IntN(len(keys))]
			c := Capacity{TotalBlocks: uint64(4 + rng.IntN(20))}
			s.AddWorker(k, c)
			m.workers[k] = c
		case op == 1 && rng.IntN(4) == 0: // remove a rank
			k := keys[rng.IntN(len(keys))]
			if s.RemoveRank(k, now) != (m.workers[k] != Capacity{}) {
				t.Fatalf("seed %d: RemoveRank(%v) disagrees", seed, k)
			}
			delete(m.workers, k)
			delete(m.used, k)
			for id, r := range m.reqs {
				if r.worker == k {
					delete(m.reqs, id)
				}
			}
		case op == 2: // engine load report
			k := keys[rng.IntN(len(keys))]
			u := uint64(rng.IntN(25))
			if s.ReportLoad(k, Load{UsedBlocks: u}, now) == nil {
				m.used[k] = u
			}
		case op <= 6: // route a small batch
			n := 1 + rng.IntN(3)
			batch := make([]Request, n)
			ovs := make([][]Overlap, n)
			for i := range batch {
				nextID++
				f, l := rng.IntN(3), 1+rng.IntN(6)
				batch[i] = Request{ID: nextID, ISL: uint32(l*4 - rng.IntN(3)), Blocks: chain(f, l)}
				switch rng.IntN(6) {
				case 0:
					batch[i].Override.Pinned, batch[i].Override.PinnedSet = keys[rng.IntN(len(keys))], true
				case 1:
					batch[i].Override.Allowed = []wire.WorkerKey{keys[rng.IntN(len(keys))], keys[rng.IntN(len(keys))]}
				}
				for _, k := range keys {
					if rng.IntN(3) == 0 {
						ovs[i] = append(ovs[i], Overlap{Worker: k, Device: uint32(rng.IntN(l + 1)), TreeSize: uint32(rng.IntN(3))})
					}
				}
			}
			// Decide one at a time so the model sees each booking.
			apply(s.Drain(nil)) // effects of earlier steps are applied before
			for i := range batch {
				r := &batch[i]
				d := s.Decide(nil, batch[i:i+1], ovs[i:i+1], now)[0]
				// Decide admits waiting requests first: apply them, then
				// cost r against the state its decision saw.
				apply(s.Drain(nil))
				want, eligible := m.costs(r, ovs[i])
				switch d.Outcome {
				case Routed:
					best := math.Inf(1)
					for _, c := range want {
						best = min(best, c)
					}
					c, ok := want[d.Worker]
					if !ok || c != best || math.Abs(c-d.Cost) > 1e-9 {
						t.Fatalf("seed %d step %d: routed %d to %v cost %v (model %v, ok %v), best %v", seed, step, r.ID, d.Worker, d.Cost, c, ok, best)
					}
					m.book(r.ID, d, r, now)
				case Queued:
					if len(want) != 0 || eligible == 0 {
						t.Fatalf("seed %d step %d: queued %d with %d candidates, %d eligible", seed, step, r.ID, len(want), eligible)
					}
					m.queued[r.ID] = true
					m.qblocks[r.ID] = r.Blocks
				case Rejected:
					switch d.Reason {
					case ReasonNoWorkers:
						if eligible != 0 {
							t.Fatalf("seed %d step %d: no-workers with %d eligible", seed, step, eligible)
						}
					case ReasonQueueFull:
						if len(want) != 0 || len(m.queued) != cfg.QueueDepth {
							t.Fatalf("seed %d step %d: queue-full with %d candidates, %d waiting", seed, step, len(want), len(m.queued))
						}
					default:
						t.Fatalf("seed %d: unexpected rejection %v", seed, d.Reason)
					}
				}
			}
		case op <= 8: // prefill done
			if id, ok := pick(); ok {
				if !s.MarkPrefillCompleted(id, now) {
					t.Fatalf("seed %d: prefill-done of active %d failed", seed, id)
				}
				m.reqs[id].pf = 0
			}
		case op <= 10: // free an active request, or cancel a waiting one
			if len(m.queued) > 0 && rng.IntN(4) == 0 {
				var id uint64 = math.MaxUint64
				for q := range m.queued {
					id = min(id, q)
				}
				if !s.Free(id, now) {
					t.Fatalf("seed %d: cancel of waiting %d failed", seed, id)
				}
				delete(m.queued, id)
				m.cancelled++
			} else if id, ok := pick(); ok {
				if !s.Free(id, now) {
					t.Fatalf("seed %d: free of active %d failed", seed, id)
				}
				delete(m.reqs, id)
			}
			if s.Free(1<<62, now) {
				t.Fatalf("seed %d: free of unknown id succeeded", seed)
			}
		default:
			s.Tick(now)
		}
		apply(s.Drain(nil))
		if err := s.CheckInvariants(); err != nil {
			t.Fatalf("seed %d step %d: %v", seed, step, err)
		}
		loads := s.AppendLoads(nil, nil, now)
		if len(loads) != len(m.workers) {
			t.Fatalf("seed %d step %d: %d ranks, model %d", seed, step, len(loads), len(m.workers))
		}
		for _, l := range loads {
			if a := m.active(l.Worker); a != l.ActiveBlocks {
				t.Fatalf("seed %d step %d: %v active %d, model %d", seed, step, l.Worker, l.ActiveBlocks, a)
			}
			if p := m.prefill(l.Worker); p != l.PrefillTokens {
				t.Fatalf("seed %d step %d: %v prefill %d, model %d", seed, step, l.Worker, l.PrefillTokens, p)
			}
			if b := m.rankBusy(l.Worker); b != l.Busy {
				t.Fatalf("seed %d step %d: %v busy %v, model %v", seed, step, l.Worker, l.Busy, b)
			}
		}
		st := s.Stats()
		if step == steps-1 {
			t.Logf("seed %d: %+v", seed, st)
		}
		if st.Active != len(m.reqs) || int(st.Cancelled) != m.cancelled || st.QueueDepth != len(m.queued) || int(st.Expirations) != m.expiries {
			t.Fatalf("seed %d step %d: stats %+v, model active %d waiting %d expired %d", seed, step, st, len(m.reqs), len(m.queued), m.expiries)
		}
	}
}
