package ingest

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/zmq"
)

// ZMQWorker is one vLLM/SGLang engine (one data-parallel rank of a worker)
// publishing KV events on a ZMQ PUB socket. It is a plain, comparable value.
type ZMQWorker struct {
	Worker uint64 // worker id (> 0)
	// DpRank is the data-parallel rank this endpoint publishes (vLLM offsets
	// each rank's port). Events whose payload carries no rank (or rank 0) are
	// taken for this rank; events naming another rank keep it.
	DpRank   uint32
	Endpoint string // the engine's PUB socket, tcp://host:port
	Replay   string // optional: the engine's replay ROUTER socket, tcp://host:port
	// Model, when set, subscribes to the topic prefix "kv@<worker>@<model>"
	// (the topic llm-d's and bench/mock's engines publish under); empty
	// subscribes to every topic, which is what vLLM's default (topic "")
	// needs.
	Model string
}

func (z ZMQWorker) key() wire.WorkerKey { return wire.WorkerKey{Worker: z.Worker, Dp: z.DpRank} }

// Topic returns the ZMQ subscription prefix: "kv@<worker>@<model>", or ""
// (every topic) without a model.
func (z ZMQWorker) Topic() string {
	if z.Model == "" {
		return ""
	}
	return fmt.Sprintf("kv@%d@%s", z.Worker, z.Model)
}

// String formats z as a --zmq-worker value (ParseZMQWorker reads it back).
func (z ZMQWorker) String() string {
	var b strings.Builder
	b.WriteString(strconv.FormatUint(z.Worker, 10))
	if z.DpRank != 0 {
		b.WriteByte(':')
		b.WriteString(strconv.FormatUint(uint64(z.DpRank), 10))
	}
	b.WriteByte('=')
	b.WriteString(z.Endpoint)
	if z.Model != "" {
		b.WriteString(",model=")
		b.WriteString(z.Model)
	}
	if z.Replay != "" {
		b.WriteString(",replay=")
		b.WriteString(z.Replay)
	}
	return b.String()
}

const zmqWorkerSyntax = "ID[:DP]=tcp://host:port[,model=NAME][,replay=tcp://host:port]"

// ParseZMQWorker parses a --zmq-worker flag value,
// "ID[:DP]=tcp://host:port[,model=NAME][,replay=tcp://host:port]": worker id
// > 0, dp rank at most wire.MaxDPRank (default 0), the engine's PUB endpoint,
// and optionally the model (topic filter) and the replay endpoint, in either
// order. Errors name the flag and say what is wrong.
func ParseZMQWorker(s string) (ZMQWorker, error) {
	bad := func(format string, args ...any) (ZMQWorker, error) {
		return ZMQWorker{}, fmt.Errorf("--zmq-worker %q: %s (want %s)", s, fmt.Sprintf(format, args...), zmqWorkerSyntax)
	}
	id, rest, ok := strings.Cut(s, "=")
	if !ok {
		return bad("missing '=' between the worker id and the endpoint")
	}
	var z ZMQWorker
	idStr, dpStr, hasDP := strings.Cut(id, ":")
	w, err := strconv.ParseUint(idStr, 10, 64)
	if err != nil || w == 0 {
		return bad("worker id %q is not an integer > 0", idStr)
	}
	z.Worker = w
	if hasDP {
		dp, err := strconv.ParseUint(dpStr, 10, 32)
		if err != nil || dp > wire.MaxDPRank {
			return bad("dp rank %q is not an integer in [0, %d]", dpStr, wire.MaxDPRank)
		}
		z.DpRank = uint32(dp)
	}
	parts := strings.Split(rest, ",")
	z.Endpoint = parts[0]
	if err := checkEndpoint(z.Endpoint); err != nil {
		return bad("endpoint: %v", err)
	}
	seen := map[string]bool{}
	for _, opt := range parts[1:] {
		k, v, ok := strings.Cut(opt, "=")
		if !ok {
			return bad("option %q is not key=value", opt)
		}
		if seen[k] {
			return bad("option %s given twice", k)
		}
		seen[k] = true
		switch k {
		case "model":
			if v == "" {
				return bad("empty model")
			}
			z.Model = v
		case "replay":
			if err := checkEndpoint(v); err != nil {
				return bad("replay endpoint: %v", err)
			}
			z.Replay = v
		default:
			return bad("unknown option %q (known: model, replay)", k)
		}
	}
	return z, nil
}

// checkEndpoint accepts tcp://host:port with a host to dial and a port in
// 1..65535.
func checkEndpoint(ep string) error {
	addr, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return fmt.Errorf("%q does not start with tcp://", ep)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %v", ep, err)
	}
	if host == "" || host == "*" {
		return fmt.Errorf("%q: the host to dial is missing", ep)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%q: port %q is not in 1..65535", ep, port)
	}
	return nil
}

// Validate checks z as AddZMQ does.
func (z ZMQWorker) Validate() error {
	switch {
	case z.Worker == 0:
		return errors.New("ingest: zmq worker id must be > 0")
	case z.DpRank > wire.MaxDPRank:
		return fmt.Errorf("ingest: zmq worker %d: dp rank %d > %d", z.Worker, z.DpRank, wire.MaxDPRank)
	}
	if err := checkEndpoint(z.Endpoint); err != nil {
		return fmt.Errorf("ingest: zmq worker %d endpoint: %w", z.Worker, err)
	}
	if z.Replay != "" {
		if err := checkEndpoint(z.Replay); err != nil {
			return fmt.Errorf("ingest: zmq worker %d replay endpoint: %w", z.Worker, err)
		}
	}
	return nil
}

// DpRankRemover is implemented by sinks that can drop one worker key's blocks
// (*shard.Index does). When a ZMQ engine restarts (its sequence numbers start
// over on a new connection: a new process with an empty cache), Ingest calls
// it before the new process's first batch, so the index does not keep the old
// process's blocks. vLLM sends no AllBlocksCleared when it starts.
type DpRankRemover interface {
	RemoveDpRank(k wire.WorkerKey) (int, error)
}

// zmqSub is one ZMQ subscription.
type zmqSub struct {
	w   ZMQWorker
	sub *zmq.Subscriber
	p   *pipe
}

// close stops the subscriber (waiting for its goroutine, hence for a handler
// call in progress) and keeps its lost-batch count.
func (z *zmqSub) close() {
	z.sub.Close()
	z.p.close()
	z.p.c.droppedGone.Add(z.sub.Stats().Lost)
}

// AddZMQ subscribes to a vLLM/SGLang engine's ZMQ PUB socket with
// wire/zmq.Subscribe, which dials (and keeps re-dialing an engine that is not
// up yet or restarts) and fills sequence gaps from the replay socket when
// z.Replay is set, and decodes its batches on the subscriber's goroutine with
// a wire.VLLMDecoder (VLLMConfig{z.Worker, Config.BlockSize, Config.EagleWindows}). Adding the same
// worker and dp rank again with the same settings is a no-op; with other
// settings it replaces the old subscription (stopped first).
func (in *Ingest) AddZMQ(z ZMQWorker) error {
	if err := z.Validate(); err != nil {
		return err
	}
	in.zmqOps.Lock()
	defer in.zmqOps.Unlock()
	k := z.key()
	in.mu.Lock()
	closed, old := in.mu.closed, in.mu.zmq[k]
	in.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if old != nil {
		if old.w == z {
			return nil
		}
		in.mu.Lock()
		delete(in.mu.zmq, k)
		in.mu.Unlock()
		old.close()
		in.log.Info("ingest: zmq worker replaced", "old", old.w.String(), "new", z.String())
	}
	p := newPipe(in, SourceZMQ)
	p.zw = z
	p.dec = wire.NewVLLMDecoder(wire.VLLMConfig{Worker: z.Worker, BlockSize: in.cfg.BlockSize, EagleWindows: in.cfg.EagleWindows})
	zs := &zmqSub{w: z, p: p}
	zs.sub = zmq.Subscribe(zmq.SubscriberConfig{
		Endpoint: z.Endpoint, ReplayEndpoint: z.Replay, Topic: z.Topic(),
		RetryInterval: in.cfg.ZMQRetryInterval, MaxMessageBytes: in.cfg.ZMQMaxMessageBytes, Logger: in.log,
	}, p.onZMQ)
	in.mu.Lock()
	if in.mu.closed { // Close ran meanwhile: it did not see zs
		in.mu.Unlock()
		zs.close()
		return ErrClosed
	}
	in.mu.zmq[k] = zs
	in.mu.Unlock()
	in.running.Store(true)
	return nil
}

// RemoveZMQ stops the ZMQ subscriptions of every dp rank of worker and waits
// for them. Removing an unknown worker does nothing.
func (in *Ingest) RemoveZMQ(worker uint64) {
	in.zmqOps.Lock()
	defer in.zmqOps.Unlock()
	var subs []*zmqSub
	in.mu.Lock()
	for k, z := range in.mu.zmq {
		if k.Worker == worker {
			subs = append(subs, z)
			delete(in.mu.zmq, k)
		}
	}
	in.mu.Unlock()
	for _, z := range subs {
		z.close()
	}
}

// onZMQ is a ZMQ subscriber's handler.
func (p *pipe) onZMQ(seq uint64, payload []byte, _ bool) {
	start := time.Now()
	p.mu.Lock()
	if !p.closed {
		restart := p.haveSeq && seq <= p.lastSeq
		if restart {
			p.engineRestarted(seq)
		}
		p.batch.Reset()
		err := p.dec.Decode(&p.batch, seq, payload)
		if err == nil {
			// Like the decoder, look at well-formed batches only: a
			// malformed one is lost, and counted as a gap too.
			if p.haveSeq && seq > p.lastSeq+1 {
				p.in.gap(p.src, p.zw.key(), p.lastSeq+1, seq, true)
			}
			p.haveSeq, p.lastSeq = true, seq
		}
		if err == nil && p.zw.DpRank != 0 {
			for i := range p.batch.Events {
				if ev := &p.batch.Events[i]; ev.Worker.Dp == 0 {
					ev.Worker.Dp = p.zw.DpRank
				}
			}
		}
		if err != nil {
			p.c.malformed.Add(1)
			p.in.malformed(p.src, p.zw.key(), err)
		}
		p.held = 1
		p.deliver()
		p.held = 0
		p.c.messages.Add(1)
	}
	p.mu.Unlock()
	p.c.observe(time.Since(start))
}

// engineRestarted handles a ZMQ sequence number that went backwards: the
// subscriber passes that on only from a new engine process. Its ids start
// over (a fresh decoder), tracking is reset, and a sink that can drop the
// old process's blocks is asked to.
func (p *pipe) engineRestarted(seq uint64) {
	p.c.restarts.Add(1)
	p.dec = wire.NewVLLMDecoder(wire.VLLMConfig{Worker: p.zw.Worker, BlockSize: p.in.cfg.BlockSize, EagleWindows: p.in.cfg.EagleWindows})
	p.haveSeq = false
	k := p.zw.key()
	removed, err := -1, error(nil)
	if r, ok := p.in.sink.(DpRankRemover); ok {
		removed, err = r.RemoveDpRank(k)
	}
	p.in.log.Warn("ingest: zmq engine restarted (sequence numbers started over); its old blocks are dropped",
		"worker", k.Worker, "dp_rank", k.Dp, "last_seq", p.lastSeq, "seq", seq,
		"blocks_removed", removed, "err", errString(err))
}
