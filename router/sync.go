package router

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// Replica sync (Config.Sync, --router-replica-sync). Every replica
// publishes the bookings its scheduler makes (a routed request with its
// worker, blocks and prefill tokens; prefill done; free) on
// plane.SyncSubject and books the other replicas' in its own scheduler, so
// that each replica sees the load the others put on the workers.
//
// The batcher appends items to a plane.SyncWriter (under a mutex it holds
// for the append only; no allocation once the buffer has grown) and wakes
// a flusher goroutine, which swaps the writer out and publishes it: at once
// when it was idle, then at most once per SyncInterval (what is appended
// meanwhile goes out in one message), and at least every SyncExpiry/4 (an
// empty message then: the heartbeat). A replica drops all the
// bookings of another when it has heard nothing from it for SyncExpiry (it
// crashed or was cut off), when the other restarts (new instance), and
// when the other says it is leaving (graceful Close). A gap in another
// replica's message sequence (a message lost, e.g. with a NATS node) drops
// the bookings of that replica made before the gap, since the lost message
// may have freed them. A new replica starts
// with none of the others' active requests: it learns the bookings made
// after it subscribed, and converges as the older requests end (Dynamo's
// behaviour).

// Defaults of the replica-sync settings.
const (
	DefaultSyncInterval = time.Millisecond
	DefaultSyncExpiry   = 5 * time.Second
	// MaxSyncReplicas bounds the other replicas one replica tracks; a
	// message from a replica beyond it is ignored and counted.
	MaxSyncReplicas = 64
)

// remoteBit marks the scheduler ids of other replicas' bookings; local ids
// (Router.nextID) never reach it.
const remoteBit = 1 << 63

// syncer is the publishing half of replica sync.
type syncer struct {
	mu sync.Mutex
	w  plane.SyncWriter // batcher appends; the flusher swaps it out

	kick     chan struct{}
	nc       *nats.Conn
	subject  string
	interval time.Duration // between messages, at least
	beat     time.Duration
	hdr      plane.SyncHeader // flusher only (Seq)
	spare    plane.SyncWriter // flusher only
	out      []byte           // flusher only
	m        *syncMetrics
	stop     chan struct{}
	done     chan struct{}
}

// syncPeer is another replica as this one knows it (batcher-owned).
type syncPeer struct {
	instance uint64
	seq      uint64
	last     int64             // router clock of its last message
	ids      map[uint64]uint64 // its request id → this scheduler's id
}

type syncMetrics struct {
	sent, received, applied, ignored, gaps, gapDrops, expired, refused, publishErrors *metrics.Counter
}

func newSyncMetrics(s *metrics.Set) *syncMetrics {
	return &syncMetrics{
		sent:          s.NewCounter("kvroute_sync_messages_sent_total"),
		received:      s.NewCounter("kvroute_sync_messages_received_total"),
		applied:       s.NewCounter("kvroute_sync_items_applied_total"),
		ignored:       s.NewCounter("kvroute_sync_items_ignored_total"),
		gaps:          s.NewCounter("kvroute_sync_messages_missed_total"),
		gapDrops:      s.NewCounter("kvroute_sync_bookings_dropped_on_gap_total"),
		expired:       s.NewCounter("kvroute_sync_replicas_expired_total"),
		refused:       s.NewCounter("kvroute_sync_messages_refused_total"),
		publishErrors: s.NewCounter("kvroute_sync_publish_errors_total"),
	}
}

// startSync subscribes to the other replicas' bookings and starts
// publishing this one's (SubscribeNATS, with Config.Sync).
func (r *Router) startSync(nc *nats.Conn) error {
	sy := &syncer{
		kick:     make(chan struct{}, 1),
		nc:       nc,
		subject:  plane.SyncSubject(r.cfg.Subjects),
		interval: r.cfg.SyncInterval,
		beat:     max(r.cfg.SyncExpiry/4, time.Millisecond),
		hdr:      plane.SyncHeader{Router: r.cfg.ID, Instance: rand.Uint64()},
		m:        r.m.sync,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	r.syncInstance.Store(sy.hdr.Instance)
	if _, err := nc.Subscribe(sy.subject, r.onSync); err != nil {
		return err
	}
	if err := r.call(func() { r.b.sync = sy }, 10*time.Second); err != nil {
		return err
	}
	go sy.run()
	return nil
}

// book, op: called on the batcher.
func (sy *syncer) book(id uint64, k wire.WorkerKey, isl, overlap, pf uint32, blocks []wire.SeqHash) {
	sy.mu.Lock()
	sy.w.Book(id, k, isl, overlap, pf, blocks)
	sy.mu.Unlock()
	sy.wake()
}

func (sy *syncer) session(session uint64, k wire.WorkerKey, blocks uint32) {
	sy.mu.Lock()
	sy.w.Session(session, k, blocks)
	sy.mu.Unlock()
	sy.wake()
}

func (sy *syncer) op(kind plane.SyncKind, id uint64) {
	sy.mu.Lock()
	sy.w.Op(kind, id)
	sy.mu.Unlock()
	sy.wake()
}

func (sy *syncer) wake() {
	select {
	case sy.kick <- struct{}{}:
	default:
	}
}

func (sy *syncer) run() {
	defer close(sy.done)
	beat := time.NewTicker(sy.beat)
	defer beat.Stop()
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-sy.stop:
			sy.flush(true)
			_ = sy.nc.FlushTimeout(time.Second)
			return
		case <-beat.C:
			sy.flush(true) // the heartbeat, with whatever is waiting
			continue
		case <-sy.kick:
		}
		if !sy.flush(false) {
			continue
		}
		// At most one message per interval: what the batcher appends
		// meanwhile goes out together.
		pause.Reset(sy.interval)
		select {
		case <-pause.C:
		case <-sy.stop:
		}
	}
}

// flush publishes the waiting items, or an empty message when force is
// set. It reports whether it published.
func (sy *syncer) flush(force bool) bool {
	sy.mu.Lock()
	if sy.w.Items() == 0 && !force {
		sy.mu.Unlock()
		return false
	}
	sy.w, sy.spare = sy.spare, sy.w
	sy.mu.Unlock()
	sy.hdr.Seq++
	leaving := false
	select {
	case <-sy.stop:
		leaving = true
	default:
	}
	h := sy.hdr
	h.Leaving = leaving
	sy.out = sy.spare.AppendMessage(sy.out[:0], h)
	sy.spare.Reset()
	if err := sy.nc.Publish(sy.subject, sy.out); err != nil {
		sy.m.publishErrors.Inc()
	} else {
		sy.m.sent.Inc()
	}
	return true
}

// close publishes what is waiting and a leaving message, and stops.
func (sy *syncer) close() {
	close(sy.stop)
	<-sy.done
}

// syncBooked publishes a local booking (batcher).
func (r *Router) syncBooked(p *pending, d sched.Decision) {
	if sy := r.b.sync; sy != nil {
		sy.book(p.id, d.Worker, p.isl, d.Overlap, d.PrefillTokens, p.seq)
		if p.who.session != 0 && r.cfg.Sched.SessionTTL > 0 {
			sy.session(p.who.session, d.Worker, uint32(len(p.seq)))
		}
	}
}

// syncOp publishes a local prefill done or free (batcher).
func (r *Router) syncOp(kind plane.SyncKind, id uint64) {
	if sy := r.b.sync; sy != nil && id&remoteBit == 0 {
		sy.op(kind, id)
	}
}

// onSync receives another replica's message (NATS goroutine).
func (r *Router) onSync(m *nats.Msg) {
	msg := new(plane.SyncMessage)
	if err := plane.DecodeSync(m.Data, msg); err != nil {
		r.m.controlErrors.Inc()
		return
	}
	if msg.Router == r.cfg.ID {
		if msg.Instance != r.syncInstance.Load() {
			r.m.sync.refused.Inc() // another process runs with this --router-id
		}
		return
	}
	if len(r.cfg.Peers) > 0 && !r.peer(msg.Router) {
		r.m.sync.refused.Inc()
		return
	}
	r.m.sync.received.Inc()
	r.post(func() { r.applySync(msg) })
}

// applySync books another replica's items in the scheduler (batcher).
func (r *Router) applySync(msg *plane.SyncMessage) {
	now := r.now()
	p := r.b.peers[msg.Router]
	if p != nil && p.instance != msg.Instance {
		r.dropPeer(msg.Router, p, now) // restarted: its old bookings are gone
		p = nil
	}
	if p == nil {
		if msg.Leaving {
			return
		}
		if len(r.b.peers) >= MaxSyncReplicas {
			r.m.sync.refused.Inc()
			return
		}
		p = &syncPeer{instance: msg.Instance, ids: map[uint64]uint64{}}
		r.b.peers[msg.Router] = p
	} else if msg.Seq > p.seq+1 {
		// A message was lost (a NATS node died under this replica or
		// the other; core NATS does not redeliver). It may have held
		// frees: the bookings made before it are uncertain, and kept
		// they would be phantom load for as long as the other replica
		// lives (cluster.TestClusterKills showed it). Drop
		// them: the other replica's requests then in flight are not
		// seen until they end, as on a new replica, never held forever.
		r.m.sync.gaps.Add(int(msg.Seq - p.seq - 1))
		r.m.sync.gapDrops.Add(len(p.ids))
		for _, id := range p.ids {
			r.s.Free(id, now)
		}
		clear(p.ids)
	}
	p.seq = msg.Seq
	p.last = now
	for i := range msg.Items {
		it := &msg.Items[i]
		switch it.Kind {
		case plane.SyncBook:
			if _, dup := p.ids[it.ID]; dup {
				r.m.sync.ignored.Inc()
				continue
			}
			id := remoteBit | r.nextID.Add(1)
			hint := sched.PrefillLoadHint{InitialEffectiveTokens: it.PrefillTokens}
			if err := r.s.AddRequest(id, it.Worker, it.Blocks, it.ISL, it.Overlap, hint, now); err != nil {
				r.m.sync.ignored.Inc() // a worker this replica does not know (yet)
				continue
			}
			p.ids[it.ID] = id
		case plane.SyncPrefillDone:
			if id, ok := p.ids[it.ID]; !ok || !r.s.MarkPrefillCompleted(id, now) {
				r.m.sync.ignored.Inc()
				continue
			}
		case plane.SyncSession:
			r.s.BindSession(it.ID, it.Worker, it.ISL, now)
		case plane.SyncFree:
			id, ok := p.ids[it.ID]
			if !ok {
				r.m.sync.ignored.Inc()
				continue
			}
			delete(p.ids, it.ID)
			r.s.Free(id, now)
		}
		r.m.sync.applied.Inc()
	}
	if msg.Leaving {
		r.dropPeer(msg.Router, p, now)
	}
}

// dropPeer frees every booking of a replica and forgets it (batcher).
func (r *Router) dropPeer(name string, p *syncPeer, now int64) {
	for _, id := range p.ids {
		r.s.Free(id, now)
	}
	delete(r.b.peers, name)
}

// expirePeers drops the replicas silent for longer than SyncExpiry
// (batcher, on tick).
func (r *Router) expirePeers(now int64) {
	for name, p := range r.b.peers {
		if now-p.last > int64(r.cfg.SyncExpiry) {
			r.m.sync.expired.Inc()
			r.cfg.Logger.Warn("router replica silent: its bookings are dropped", "router", name,
				"bookings", len(p.ids), "silent_for", time.Duration(now-p.last))
			r.dropPeer(name, p, now)
		}
	}
}

// syncState reports the replicas tracked and their bookings (batcher).
func (r *Router) syncState() (replicas, bookings int) {
	for _, p := range r.b.peers {
		bookings += len(p.ids)
	}
	return len(r.b.peers), bookings
}
