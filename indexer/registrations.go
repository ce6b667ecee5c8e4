package indexer

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/wire/plane"
)

// Workers that register on NATS (heartbeats, as for the router) are known
// to the indexer too: their model scopes their answers, a ZMQ publisher is
// subscribed to (node.Node.WorkerJoined), and a worker that leaves or
// expires is dropped from the index, as the router does. While the NATS
// connection is down no worker expires (heartbeatsArriveLocked).

func (s *Service) subscribeRegistrations() error {
	s.regs = plane.NewRegistry()
	for _, sub := range []struct {
		subject string
		h       nats.MsgHandler
	}{{s.cfg.Node.Subjects.Heartbeat, s.onHeartbeat}, {s.cfg.Node.Subjects.Leave, s.onLeave}} {
		if _, err := s.NC.Subscribe(sub.subject, sub.h); err != nil {
			return err
		}
	}
	s.regStop, s.regDone = make(chan struct{}), make(chan struct{})
	go s.expireLoop(time.Second)
	return s.NC.Flush()
}

func (s *Service) onHeartbeat(m *nats.Msg) {
	var reg plane.Registration
	if err := plane.Decode(m.Data, &reg); err != nil {
		s.badControl.Add(1)
		return
	}
	if err := reg.ValidateRanks(plane.DefaultMaxDpRanks); err != nil {
		s.badControl.Add(1)
		s.cfg.Logger.Debug("worker registration ignored", "worker", reg.WorkerID, "err", err)
		return
	}
	if reg.BlockSize != s.cfg.Node.BlockSize {
		s.badControl.Add(1)
		s.cfg.Logger.Error("worker registration ignored: block size mismatch", "worker", reg.WorkerID,
			"worker_block_size", reg.BlockSize, "indexer_block_size", s.cfg.Node.BlockSize)
		return
	}
	s.regMu.Lock()
	var err error
	if s.changes, err = s.regs.Heartbeat(reg, time.Now(), s.changes[:0]); err != nil {
		s.badControl.Add(1) // a conflicting id (another URL) or a full registry: not a takeover
		s.cfg.Logger.Debug("worker registration refused", "worker", reg.WorkerID, "err", err)
	}
	s.applyChangesLocked()
	s.regMu.Unlock()
}

func (s *Service) onLeave(m *nats.Msg) {
	var reg plane.Registration
	if err := plane.Decode(m.Data, &reg); err != nil {
		s.badControl.Add(1)
		return
	}
	s.regMu.Lock()
	var err error
	if s.changes, err = s.regs.Leave(reg, s.changes[:0]); err != nil {
		s.badControl.Add(1) // a leave that does not match the live registration
	}
	s.applyChangesLocked()
	s.regMu.Unlock()
}

func (s *Service) expireLoop(every time.Duration) {
	defer close(s.regDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.regStop:
			return
		case now := <-t.C:
			s.regMu.Lock()
			if s.heartbeatsArriveLocked(now) {
				s.changes = s.regs.Tick(now, s.changes[:0])
				s.applyChangesLocked()
			}
			s.regMu.Unlock()
		}
	}
}

// heartbeatsArriveLocked reports whether the workers' heartbeats can
// arrive (node.Node.ControlPlane). While the NATS connection is down they
// cannot, and no worker expires: the indexer keeps their blocks (and their
// ZMQ subscriptions) and answers from them. After a loss, every worker gets
// a fresh grace from now (plane.Registry.Renew) before expiry resumes. The
// caller holds regMu.
func (s *Service) heartbeatsArriveLocked(now time.Time) bool {
	up, losses := s.ControlPlane()
	if !up {
		if !s.planeDown {
			s.planeDown = true
			s.cfg.Logger.Warn("NATS down: registered workers are kept (no heartbeats can arrive)", "workers", s.regs.Len())
		}
		return false
	}
	if losses != s.planeLosses || s.planeDown {
		s.planeLosses, s.planeDown = losses, false
		s.regs.Renew(now, plane.ReconnectGrace)
		s.cfg.Logger.Info("NATS back: heartbeat expiry resumes, each registered worker with a fresh grace",
			"workers", s.regs.Len(), "grace_heartbeats", plane.ExpiryFactor, "grace_at_least", plane.ReconnectGrace)
	}
	return true
}

// applyChangesLocked acts on registry changes; the caller holds regMu.
func (s *Service) applyChangesLocked() {
	for _, c := range s.changes {
		id := c.Reg.WorkerID
		switch c.Kind {
		case plane.Joined, plane.Updated:
			model := c.Reg.Model
			s.mu.Lock()
			w := s.workers[id]
			if w == nil || w.viaNATS {
				s.workers[id] = &registered{Model: model, Tenant: DefaultTenant, Endpoints: map[uint32]string{}, viaNATS: true}
			}
			s.mu.Unlock()
			if c.Kind == plane.Joined {
				s.WorkerJoined(c.Reg)
			}
		case plane.Left, plane.Expired:
			s.mu.Lock()
			if w := s.workers[id]; w != nil && w.viaNATS {
				delete(s.workers, id)
			}
			s.mu.Unlock()
			s.WorkerLeft(id)
			_, _ = s.Index.RemoveWorker(id)
			s.cfg.Logger.Info("worker removed", "worker", id, "why", c.Kind.String())
		}
	}
}
