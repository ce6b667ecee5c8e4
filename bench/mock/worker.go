package mock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/bench/engine"
	"github.com/kvroute/kvroute/bench/kvcache"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/plane"
	"github.com/kvroute/kvroute/wire/zmq"
)

// Errors.
var (
	ErrClosed    = errors.New("mock: worker closed")
	ErrRestarted = errors.New("mock: worker restarted")
	// errClientGone ends a call whose client disconnected (aborted in the
	// engine; nobody reads the answer).
	errClientGone = errors.New("mock: client disconnected")
)

// WorkerConfig configures one Worker (plain data, copied by StartWorker).
// Zero fields take the defaults noted.
type WorkerConfig struct {
	ID        uint64 // worker id (> 0)
	Host      string // listen host; default 127.0.0.1
	Port      int    // HTTP port; 0 picks a free one
	BlockSize int    // tokens per KV block; default 16
	KVBlocks  int    // KV cache blocks; default 16384
	// HostKVBlocks > 0 adds a host tier of that many blocks behind the
	// device (engine.Config.HostCapacity): evicted blocks are offloaded
	// and announced with medium CPU / storage tier host; prompts onload
	// them at HostGBps (default engine.DefaultHostGBps).
	HostKVBlocks     int
	HostGBps         float64
	MaxNumSeqs       int // default 256
	MaxBatchedTokens int // default 8192
	Speedup          float64
	Perf             engine.Perf // default engine.DefaultPerf
	Model            string      // default "mock"
	// ChatTemplate renders chat messages before tokenizing (the router's
	// --chat-template); nil: ChatML.
	ChatTemplate openai.ChatTemplate
	Transport    string // plane.Transport*; default dynamo
	ZMQPort      int    // with TransportZMQ: PUB on this port, replay on port+1; 0 picks free ones
	Subjects     plane.Subjects
	Heartbeat    time.Duration // registration interval; default 1s
	LoadInterval time.Duration // minimum gap between load messages; default 50ms
	DropFraction float64       // fault: fraction of event messages not sent (ZMQ: sent only to the replay buffer)
	DupFraction  float64       // fault: fraction of event messages sent twice
	Seed         uint64        // seeds the fault switches
	// RecoveryRing is the number of recent KV events kept to answer
	// recovery requests (NATS transports); default DefaultRecoveryRing,
	// negative: no ring (every request is answered with a dump).
	RecoveryRing int
	Logger       *slog.Logger
	// Tokenizer tokenizes text prompts and rendered chat (kvroute mock
	// --tokenizer); default openai.BytesTokenizer, as the router's default.
	Tokenizer openai.Tokenizer
	// DPSize is the number of data-parallel ranks behind the worker's one
	// URL (vLLM --data-parallel-size with its internal load balancer):
	// each rank is an engine of its own, with KVBlocks blocks, its own
	// event ids, events and load messages carrying its dp rank, and a ZMQ
	// PUB/replay pair at ZMQPort+r / ZMQPort+DPSize+r. A request goes to
	// the rank named by its X-Data-Parallel-Rank header, else to the least
	// loaded rank. Default 1, at most MaxDPSize.
	DPSize int
	// Role is the worker's part in disaggregated serving: RoleBoth
	// (default: aggregated, P/D fields in bodies are ignored), RolePrefill
	// or RoleDecode (see the package doc, Disaggregated serving).
	Role string
	// PDProtocol is the disaggregation protocol a prefill or decode worker
	// speaks: ProtocolNIXL (default) or ProtocolSGLang.
	PDProtocol string
	// TransferGBps is the modelled KV transfer bandwidth a decode worker
	// pulls blocks at; default DefaultTransferGBps.
	TransferGBps float64
	// TransferTimeout is how long a prefill worker keeps a finished
	// prefill's blocks pinned for its decode worker; default
	// DefaultTransferTimeout.
	TransferTimeout time.Duration
	// BootstrapTimeout is how long an SGLang-protocol decode worker waits
	// for its prefill; default DefaultBootstrapTimeout.
	BootstrapTimeout time.Duration

	// AnnounceBlockSize, when > 0, is the block size the registration
	// announces instead of BlockSize: a fault (an engine configured apart
	// from what its launcher announces) that only the engine's
	// cached-token reports show.
	AnnounceBlockSize int
}

// MaxDPSize bounds WorkerConfig.DPSize.
const MaxDPSize = 64

// HeaderDPRank is the request header that pins a request to a data-parallel
// rank, as vLLM's and SGLang's HTTP servers read it (case-insensitively).
const HeaderDPRank = "X-Data-Parallel-Rank"

func (c *WorkerConfig) defaults() {
	if c.Tokenizer == nil {
		c.Tokenizer = openai.BytesTokenizer{}
	}
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.BlockSize <= 0 {
		c.BlockSize = 16
	}
	if c.KVBlocks <= 0 {
		c.KVBlocks = 16384
	}
	if c.HostGBps <= 0 {
		c.HostGBps = engine.DefaultHostGBps
	}
	if c.MaxNumSeqs <= 0 {
		c.MaxNumSeqs = 256
	}
	if c.MaxBatchedTokens <= 0 {
		c.MaxBatchedTokens = 8192
	}
	if c.Speedup <= 0 {
		c.Speedup = 1
	}
	if c.Model == "" {
		c.Model = "mock"
	}
	if c.Transport == "" {
		c.Transport = plane.TransportDynamo
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = time.Second
	}
	if c.LoadInterval <= 0 {
		c.LoadInterval = 50 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.RecoveryRing == 0 {
		c.RecoveryRing = DefaultRecoveryRing
	}
	if c.DPSize <= 0 {
		c.DPSize = 1
	}
	if c.Role == "" {
		c.Role = RoleBoth
	}
	if c.PDProtocol == "" {
		c.PDProtocol = ProtocolNIXL
	}
	if c.TransferGBps <= 0 {
		c.TransferGBps = DefaultTransferGBps
	}
	if c.TransferTimeout <= 0 {
		c.TransferTimeout = DefaultTransferTimeout
	}
	if c.BootstrapTimeout <= 0 {
		c.BootstrapTimeout = DefaultBootstrapTimeout
	}
}

// call is one HTTP request in the engine. Fields after ring are guarded by
// Worker.mu.
type call struct {
	id      uint64
	prompt  int
	max     int
	digest  uint64           // names the prompt for generation (genToken)
	local   []wire.BlockHash // hashes of the full blocks of prompt and output (token map references, ZMQ only)
	ring    chan struct{}    // one-slot doorbell: progress was made
	first   bool
	cached  int
	emitted int        // output tokens produced so far
	gone    bool       // the client disconnected: queued in Worker.mu.aborts
	done    bool       // finished or failed
	err     error      // why it failed
	trace   *callTrace // nil unless the worker traces calls (traceCalls)
	// usageChunk: the stream asked stream_options.include_usage; its usage
	// comes alone in a last chunk without choices, as vLLM sends it.
	usageChunk bool
}

// callTrace is a call's timeline on the engine's clock (the end of the
// engine's steps, engine.Effect.At), kept only while a test traces calls:
// made[i] is the end of the step that produced output token i, and sent[i]
// the end of the last step delivered when the chunk carrying token i was
// written to the stream (streamed calls only). Neither depends on how
// promptly a client reads.
type callTrace struct {
	made, sent []time.Duration
}

// advance raises c.emitted to n, tokens produced by the step that ended at
// end.
func (c *call) advance(n int, end time.Duration) {
	if c.trace != nil {
		for i := c.emitted; i < n; i++ {
			c.trace.made = append(c.trace.made, end)
		}
	}
	c.emitted = n
}

// tokEntry is a prompt block's tokens, referenced by the calls using it.
type tokEntry struct {
	tokens []uint32
	refs   int
}

// counters are a Worker's request counters (guarded by Worker.mu).
type counters struct {
	requests, streams, failed, badRequests uint64
	aborted                                uint64 // clients that disconnected before the end
	promptTokens, completionTokens         uint64
	cachedTokens                           uint64
}

// Worker is one simulated engine: an HTTP server, an engine loop goroutine,
// and its event, load and heartbeat publishers. Its methods are
// goroutine-safe; the zero value is not usable, use StartWorker.
type Worker struct {
	cfg   WorkerConfig
	tmpls *openai.ChatTemplates // cfg.ChatTemplate; nil: ChatML
	nc    *nats.Conn
	epoch time.Time
	ln    net.Listener
	srv   *fasthttp.Server
	url   string
	pub   *zmq.Publisher // TransportZMQ only
	topic string
	// instance is the registration's instance_id: drawn at start, so that
	// a router tells this worker's heartbeats and withdrawal from another
	// process registering the same id.
	instance string
	// rank is this engine's dp rank. With DPSize > 1, ranks holds every
	// rank's Worker (ranks[0] is this one, the front: it owns the HTTP
	// server, the registration and the heartbeats) and the others have
	// ranks nil.
	rank  uint32
	ranks []*Worker
	pd    *pdShared     // every rank's: pending transfers
	rr    atomic.Uint32 // the front's tie-break rotation over ranks

	wake      chan struct{} // one-slot doorbell for the engine loop
	stop      chan struct{}
	done      chan struct{} // engine loop exited
	hbDone    chan struct{}
	closeOnce sync.Once

	mu struct {
		sync.Mutex
		eng       *engine.Engine
		calls     map[uint64]*call
		aborts    []*call // calls whose client went away, for the engine loop
		toks      map[wire.BlockHash]*tokEntry
		kept      map[wire.EngineHash]keptBlock // ZMQ with a host tier: tokens of every cached block
		nextID    uint64
		paused    bool
		restart   bool
		restarted []chan struct{} // closed when the pending restart happened
		closed    bool
		c         counters
		drop      float64 // fault switches (from the config, then SetFaults)
		dup       float64
		cut       bool // CutEvents: nothing is published
		rec       recRing
		// clock is the end of the last step delivered to the calls
		// (engine time). With tracing, every call submitted gets a trace,
		// appended to traces.
		clock   time.Duration
		tracing bool
		traces  []*callTrace
	}
	recSub *nats.Subscription // recovery requests (NATS transports)

	conns struct {
		sync.Mutex
		m map[net.Conn]struct{}
	}

	// loop-goroutine state
	out      outbox
	rng      *rand.Rand
	seq      uint64 // Dynamo envelope sequence
	lastLoad plane.Load
	loadAt   time.Time
	loadSet  bool
}

// StartWorker starts a worker: it binds its HTTP (and ZMQ) sockets, starts
// the engine loop (one per dp rank) and heartbeats, and announces itself on
// nc (nil: no NATS, only with TransportZMQ or TransportNone).
func StartWorker(cfg WorkerConfig, nc *nats.Conn) (*Worker, error) {
	cfg.defaults()
	if cfg.ID == 0 {
		return nil, errors.New("mock: worker id must be > 0")
	}
	if !validRole(cfg.Role) {
		return nil, fmt.Errorf("mock: worker %d: role %q: want prefill, decode or both", cfg.ID, cfg.Role)
	}
	if !validProtocol(cfg.PDProtocol) {
		return nil, fmt.Errorf("mock: worker %d: pd protocol %q: want vllm-nixl or sglang", cfg.ID, cfg.PDProtocol)
	}
	if cfg.DPSize > MaxDPSize {
		return nil, fmt.Errorf("mock: worker %d: dp size %d exceeds %d", cfg.ID, cfg.DPSize, MaxDPSize)
	}
	switch cfg.Transport {
	case plane.TransportDynamo, plane.TransportNative:
		if nc == nil {
			return nil, fmt.Errorf("mock: event transport %s needs a NATS connection", cfg.Transport)
		}
	case plane.TransportZMQ, plane.TransportNone:
	default:
		return nil, fmt.Errorf("mock: unknown event transport %q (want dynamo, native, zmq or none)", cfg.Transport)
	}
	epoch := time.Now()
	instance := strconv.FormatUint(rand.Uint64(), 36) // global rand: distinct even for equal seeds
	ranks := make([]*Worker, cfg.DPSize)
	for r := range ranks {
		ranks[r] = newRank(cfg, nc, epoch, instance, uint32(r))
	}
	w := ranks[0]
	if cfg.DPSize > 1 {
		w.ranks = ranks
	}
	fail := func(err error) (*Worker, error) {
		for _, rw := range ranks {
			if rw.recSub != nil {
				_ = rw.recSub.Unsubscribe()
			}
			if rw.pub != nil {
				_ = rw.pub.Close()
			}
		}
		if w.ln != nil {
			w.ln.Close()
		}
		return nil, fmt.Errorf("mock: worker %d: %w", cfg.ID, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
	if err != nil {
		return fail(fmt.Errorf("listen: %w", err))
	}
	w.ln = ln
	w.url = "http://" + ln.Addr().String()
	pd := &pdShared{host: cfg.Host, port: ln.Addr().(*net.TCPAddr).Port}
	pd.mu.pending = make(map[string]*pendingKV)
	pd.mu.waiters = make(map[string]chan struct{})
	for _, rw := range ranks {
		rw.pd = pd
	}
	if cfg.Transport == plane.TransportZMQ {
		if err := openZMQ(ranks); err != nil {
			return fail(err)
		}
	}
	w.srv = &fasthttp.Server{
		Handler: w.dispatch, Name: "kvroute-mock", NoDefaultDate: true,
		ReadTimeout: time.Minute, IdleTimeout: time.Minute, CloseOnShutdown: true,
		Logger: quietLogger{}, ConnState: w.trackConn,
	}
	if nc != nil && cfg.Subjects.Recover != "" && (cfg.Transport == plane.TransportDynamo || cfg.Transport == plane.TransportNative) {
		for _, rw := range ranks {
			if rw.recSub, err = nc.Subscribe(cfg.Subjects.RecoverSubject(cfg.ID), rw.onRecover); err != nil {
				return fail(fmt.Errorf("subscribe to recovery requests: %w", err))
			}
		}
	}
	go w.srv.Serve(ln) //nolint:errcheck // Serve returns when the listener closes
	w.publishRegistration(w.cfg.Subjects.Heartbeat)
	go w.heartbeat()
	for _, rw := range ranks {
		go rw.loop()
	}
	return w, nil
}

// newRank makes the engine side of one dp rank: its engine, maps, recovery
// ring and channels (no sockets yet).
func newRank(cfg WorkerConfig, nc *nats.Conn, epoch time.Time, instance string, rank uint32) *Worker {
	w := &Worker{
		cfg: cfg, nc: nc, epoch: epoch, instance: instance, rank: rank,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), hbDone: make(chan struct{}),
		rng: rand.New(rand.NewPCG(cfg.Seed^uint64(rank)<<48, cfg.ID)),
	}
	if cfg.ChatTemplate != nil {
		w.tmpls = &openai.ChatTemplates{Default: cfg.ChatTemplate}
	}
	if cfg.Transport == plane.TransportZMQ {
		w.topic = fmt.Sprintf("kv@%d@%s", cfg.ID, cfg.Model)
	}
	w.mu.eng = w.newEngine()
	w.mu.calls = make(map[uint64]*call)
	w.mu.drop, w.mu.dup = cfg.DropFraction, cfg.DupFraction
	w.mu.toks = make(map[wire.BlockHash]*tokEntry)
	if cfg.RecoveryRing > 0 {
		w.mu.rec.slots = make([]wire.Event, cfg.RecoveryRing)
	}
	w.mu.rec.epoch = uint64(epoch.UnixNano()) ^ cfg.ID<<32 ^ uint64(rank)<<24
	return w
}

// openZMQ binds every rank's PUB and replay sockets: rank r publishes on
// base+r and replays on base+n+r (n ranks), as vLLM offsets its endpoint
// by the dp rank. With ZMQPort 0 the base is a free port (tried again on a
// port taken meanwhile).
func openZMQ(ranks []*Worker) error {
	cfg := ranks[0].cfg
	n := len(ranks)
	var err error
	for try := 0; try < 8; try++ {
		base := cfg.ZMQPort
		if base == 0 {
			if base, err = freePort(cfg.Host); err != nil {
				return err
			}
			if base+2*n > 65536 {
				continue
			}
		}
		for r, rw := range ranks {
			pp, rp := base+r, base+n+r
			if n == 1 && cfg.ZMQPort == 0 {
				if rp, err = freePort(cfg.Host); err != nil {
					break
				}
			}
			rw.pub, err = zmq.NewPublisher(zmq.PublisherConfig{
				Endpoint:       "tcp://" + net.JoinHostPort(cfg.Host, strconv.Itoa(pp)),
				ReplayEndpoint: "tcp://" + net.JoinHostPort(cfg.Host, strconv.Itoa(rp)),
				Topic:          rw.topic, Logger: cfg.Logger,
			})
			if err != nil {
				break
			}
		}
		if err == nil {
			return nil
		}
		for _, rw := range ranks {
			if rw.pub != nil {
				_ = rw.pub.Close()
				rw.pub = nil
			}
		}
		if cfg.ZMQPort != 0 {
			return err
		}
	}
	return err
}

func (w *Worker) trackConn(c net.Conn, st fasthttp.ConnState) {
	w.conns.Lock()
	defer w.conns.Unlock()
	switch st {
	case fasthttp.StateNew:
		if w.conns.m == nil {
			w.conns.m = map[net.Conn]struct{}{}
		}
		w.conns.m[c] = struct{}{}
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		delete(w.conns.m, c)
	}
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (w *Worker) newEngine() *engine.Engine {
	return engine.New(engine.Config{
		Worker: wire.WorkerKey{Worker: w.cfg.ID, Dp: w.rank}, Capacity: w.cfg.KVBlocks, BlockSize: w.cfg.BlockSize,
		MaxNumSeqs: w.cfg.MaxNumSeqs, MaxBatchedTokens: w.cfg.MaxBatchedTokens, Speedup: w.cfg.Speedup, Perf: w.cfg.Perf,
		HostCapacity: w.cfg.HostKVBlocks, HostBlockTime: engine.HostBlockTime(w.cfg.BlockSize, w.cfg.HostGBps),
	})
}

// ID returns the worker id.
func (w *Worker) ID() uint64 { return w.cfg.ID }

// URL returns the worker's base URL, e.g. http://127.0.0.1:9101.
func (w *Worker) URL() string { return w.url }

// Config returns the configuration with defaults filled in.
func (w *Worker) Config() WorkerConfig { return w.cfg }

// ZMQEndpoint and ZMQReplay return the PUB and replay addresses
// (tcp://host:port), or "" without TransportZMQ.
func (w *Worker) ZMQEndpoint() string {
	if w.pub == nil {
		return ""
	}
	return "tcp://" + w.pub.Addr()
}

// ZMQReplay returns the replay ROUTER address, or "" without TransportZMQ.
func (w *Worker) ZMQReplay() string {
	if w.pub == nil {
		return ""
	}
	return "tcp://" + w.pub.ReplayAddr()
}

// Topic returns the ZMQ topic, kv@<worker>@<model> ("" without TransportZMQ).
func (w *Worker) Topic() string { return w.topic }

// Registration returns the worker's registration message. A prefill or
// decode worker announces its role and protocol (and, speaking SGLang, its
// bootstrap port); an aggregated one leaves them out, as before.
func (w *Worker) Registration() plane.Registration {
	reg := plane.Registration{
		WorkerID: w.cfg.ID, Instance: w.instance, URL: w.url, Model: w.cfg.Model, DpRanks: w.dpRanks(),
		BlockSize: w.announcedBlockSize(), KVBlocks: w.cfg.KVBlocks, MaxBatchedTokens: w.cfg.MaxBatchedTokens,
		EventTransport: w.cfg.Transport, ZMQEndpoint: w.ZMQEndpoint(), ZMQReplay: w.ZMQReplay(),
		HeartbeatMillis: int(w.cfg.Heartbeat / time.Millisecond),
	}
	if w.cfg.Role != RoleBoth { // an aggregated worker registers as before
		reg.Role, reg.PDProtocol = w.cfg.Role, w.cfg.PDProtocol
		if w.cfg.PDProtocol == ProtocolSGLang {
			reg.BootstrapPort = w.pd.port
		}
	}
	return reg
}

// DPSize returns the number of dp ranks behind the worker's URL.
func (w *Worker) DPSize() int { return max(len(w.ranks), 1) }

// Rank returns dp rank r's engine side, for Held, Stats and Idle of that
// rank (Rank(0) is w itself), or nil when the worker has no rank r.
func (w *Worker) Rank(r int) *Worker {
	switch {
	case r == 0:
		return w
	case r > 0 && r < len(w.ranks):
		return w.ranks[r]
	}
	return nil
}

// all returns every rank's Worker (w alone without dp ranks).
func (w *Worker) all() []*Worker {
	if w.ranks == nil {
		return []*Worker{w}
	}
	return w.ranks
}

func (w *Worker) dpRanks() []uint32 {
	rs := make([]uint32, w.DPSize())
	for i := range rs {
		rs[i] = uint32(i)
	}
	return rs
}

// Held appends the blocks this rank's KV cache holds to dst (see
// kvcache.Manager.Held) and returns it; Rank(r).Held for the other ranks.
func (w *Worker) Held(dst []kvcache.HeldBlock) []kvcache.HeldBlock {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.eng.KV().Held(dst)
}

// HostHeld appends the blocks this rank's host tier holds to dst (see
// kvcache.Manager.HostHeld; nothing without WorkerConfig.HostKVBlocks) and
// returns it; Rank(r).HostHeld for the other ranks.
func (w *Worker) HostHeld(dst []kvcache.HeldBlock) []kvcache.HeldBlock {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.eng.KV().HostHeld(dst)
}

// Stats returns this rank's engine counters (reset by Restart).
func (w *Worker) Stats() engine.Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.eng.Stats()
}

// Idle reports whether no request is in any rank's engine.
func (w *Worker) Idle() bool {
	for _, rw := range w.all() {
		rw.mu.Lock()
		idle := rw.mu.eng.Idle() && len(rw.mu.calls) == 0
		rw.mu.Unlock()
		if !idle {
			return false
		}
	}
	return true
}

// load is the rank's queue for the front's choice of a rank: requests
// waiting count four times a running one, as vLLM's DP load balancer
// weighs them.
func (w *Worker) load() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	waiting, running := w.mu.eng.Load()
	return 4*waiting + running
}

// SetFaults sets the fractions of event messages dropped and duplicated
// from the next step on, on every rank.
func (w *Worker) SetFaults(drop, dup float64) {
	for _, rw := range w.all() {
		rw.mu.Lock()
		rw.mu.drop, rw.mu.dup = drop, dup
		rw.mu.Unlock()
	}
}

// Pause stops every rank's engine loop after its current step and the
// heartbeats at once (none is published after Pause returns), as a hung
// engine would; requests queue. Resume undoes it.
func (w *Worker) Pause() {
	for _, rw := range w.all() {
		rw.mu.Lock()
		rw.mu.paused = true
		rw.mu.Unlock()
	}
}

// Resume restarts a paused worker.
func (w *Worker) Resume() {
	for _, rw := range w.all() {
		rw.mu.Lock()
		rw.mu.paused = false
		rw.mu.Unlock()
		rw.ring()
	}
}

// Restart simulates an engine restart at the end of the current step, on
// every rank: in-flight requests fail (HTTP 503), each engine starts over
// with an empty cache, and its first event (id 1) is Cleared. It also
// resumes a paused worker. It returns once the restart happened, so
// requests submitted after it go to the new engines.
func (w *Worker) Restart() {
	for _, rw := range w.all() {
		done := make(chan struct{})
		rw.mu.Lock()
		rw.mu.restart = true
		rw.mu.restarted = append(rw.mu.restarted, done)
		rw.mu.paused = false
		rw.mu.Unlock()
		rw.ring()
		select {
		case <-done:
		case <-rw.done: // closed meanwhile
		}
	}
}

// CutConnections closes every open HTTP connection at once, without an
// answer or the end of a stream, as a crashed engine process looks to its
// peers; the worker keeps accepting new connections. Requests in flight
// run on in the engine (the model cannot abort them).
func (w *Worker) CutConnections() {
	w.conns.Lock()
	defer w.conns.Unlock()
	for c := range w.conns.m {
		c.Close()
	}
}

func (w *Worker) ring() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Close stops the worker: in-flight requests fail, the HTTP server and ZMQ
// sockets close, and a leave message is published. It is idempotent.
func (w *Worker) Close() error {
	var err error
	w.closeOnce.Do(func() {
		ranks := w.all()
		for _, rw := range ranks {
			if rw.recSub != nil {
				_ = rw.recSub.Unsubscribe()
			}
			close(rw.stop)
		}
		for _, rw := range ranks {
			<-rw.done
		}
		<-w.hbDone
		for _, rw := range ranks {
			rw.mu.Lock()
			rw.mu.closed = true
			rw.failAllLocked(ErrClosed)
			rw.mu.Unlock()
		}
		// Connections a client opened but never used (StateNew) are not
		// closed by fasthttp's shutdown; close what is left after a grace
		// period for the failed requests' answers.
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		if err = w.srv.ShutdownWithContext(ctx); errors.Is(err, context.DeadlineExceeded) {
			err = nil
			w.conns.Lock()
			for c := range w.conns.m {
				c.Close()
			}
			w.conns.Unlock()
		}
		cancel()
		for _, rw := range ranks {
			if rw.pub != nil {
				if e := rw.pub.Close(); err == nil {
					err = e
				}
			}
		}
		w.publishRegistration(w.cfg.Subjects.Leave)
	})
	return err
}

func (w *Worker) publishRegistration(subject string) {
	if w.nc == nil || subject == "" {
		return
	}
	reg := w.Registration()
	if err := w.nc.Publish(subject, plane.Encode(&reg)); err != nil {
		w.cfg.Logger.Warn("mock: publish registration", "worker", w.cfg.ID, "err", err)
	}
}

func (w *Worker) heartbeat() {
	defer close(w.hbDone)
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		// Published under the lock: once Pause returns, no heartbeat
		// leaves until Resume.
		w.mu.Lock()
		if !w.mu.paused {
			w.publishRegistration(w.cfg.Subjects.Heartbeat)
		}
		w.mu.Unlock()
	}
}

// submit hashes tokens and the output they will generate, and queues a
// request; the call's ring is signalled on progress.
//
// With opt.pin the request's blocks stay allocated after it finishes (a
// prefill leg, until hold's transfer ends); opt.pulled are the prompt block
// hashes a decode leg pulled from its prefill worker: the prefix matching
// this prompt's counts as transferred.
func (w *Worker) submit(tokens []uint32, maxTokens int, lora, salt []byte, mm []wire.MMRange, opt submitOpts) (*call, error) {
	bs := w.cfg.BlockSize
	if (len(tokens)+maxTokens+bs-1)/bs > w.cfg.KVBlocks {
		return nil, engine.ErrTooLong // before materializing up to 2^24 output tokens
	}
	seed := wire.SaltSeed(lora, salt)
	c := &call{prompt: len(tokens), max: maxTokens, ring: make(chan struct{}, 1), digest: promptDigest(tokens, seed)}
	// The blocks past the prompt's hold its tail and the generated tokens,
	// known in advance (see gen.go): the engine stores them under the hashes
	// a router computes for a prompt that repeats them.
	all := appendOutput(append(make([]uint32, 0, len(tokens)+maxTokens), tokens...), c.digest, maxTokens)
	c.local, _, _ = wire.LocalHashesMM(make([]wire.BlockHash, 0, len(all)/bs), all, bs, seed, mm, nil, nil)
	np := len(tokens) / bs
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.closed {
		return nil, ErrClosed
	}
	w.mu.nextID++
	c.id = w.mu.nextID
	moved := 0
	for moved < min(np, len(opt.pulled)) && opt.pulled[moved] == c.local[moved] {
		moved++
	}
	if err := w.mu.eng.Submit(engine.Request{
		ID: c.id, Prompt: c.local[:np], Output: c.local[np:], PromptTokens: len(tokens), MaxTokens: maxTokens,
		Transferred: moved * bs, Pin: opt.pin,
	}, time.Since(w.epoch)); err != nil {
		return nil, err
	}
	w.mu.calls[c.id] = c
	if w.mu.tracing {
		c.trace = new(callTrace)
		w.mu.traces = append(w.mu.traces, c.trace)
	}
	if w.cfg.Transport == plane.TransportZMQ {
		for i, h := range c.local {
			e := w.mu.toks[h]
			if e == nil {
				e = &tokEntry{tokens: append([]uint32(nil), all[i*bs:(i+1)*bs]...)}
				w.mu.toks[h] = e
			}
			e.refs++
		}
	}
	w.mu.c.requests++
	w.mu.c.promptTokens += uint64(len(tokens))
	w.ring()
	return c, nil
}

// submitOpts are submit's P/D options.
type submitOpts struct {
	pin    bool
	pulled []wire.BlockHash
}

// endLocked retires c (finished or failed) and drops its token references.
func (w *Worker) endLocked(c *call, err error) {
	c.done, c.err = true, err
	delete(w.mu.calls, c.id)
	if w.cfg.Transport == plane.TransportZMQ {
		for _, h := range c.local {
			if e := w.mu.toks[h]; e != nil {
				if e.refs--; e.refs <= 0 {
					delete(w.mu.toks, h)
				}
			}
		}
	}
	switch {
	case errors.Is(err, errClientGone):
		w.mu.c.aborted++
	case err != nil:
		w.mu.c.failed++
	default:
		w.mu.c.completionTokens += uint64(c.emitted)
		w.mu.c.cachedTokens += uint64(c.cached)
	}
	notify(c)
}

func notify(c *call) {
	select {
	case c.ring <- struct{}{}:
	default:
	}
}

// abort asks the engine loop to abort c, whose client went away; the loop
// does it between steps, after the last step's events are encoded (they may
// need c's token map entries).
func (w *Worker) abort(c *call) {
	w.mu.Lock()
	if !c.done && !c.gone {
		c.gone = true
		w.mu.aborts = append(w.mu.aborts, c)
	}
	w.mu.Unlock()
	w.ring()
}

// abortLocked aborts the queued calls in the engine (vLLM's abort_request:
// blocks freed, nothing announced) and ends them.
func (w *Worker) abortLocked() {
	for i, c := range w.mu.aborts {
		if !c.done {
			w.mu.eng.Abort(c.id)
			w.endLocked(c, errClientGone)
		}
		w.mu.aborts[i] = nil
	}
	w.mu.aborts = w.mu.aborts[:0]
}

func (w *Worker) failAllLocked(err error) {
	for _, c := range w.mu.calls {
		w.endLocked(c, err)
	}
}

// loop is the engine goroutine (see the package doc, Live mode).
func (w *Worker) loop() {
	defer close(w.done)
	var next time.Duration // the earliest start of the next step
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		w.mu.Lock()
		if w.mu.restart {
			w.restartLocked()
		}
		if w.mu.paused {
			w.mu.Unlock()
			if !w.park(idle, 0) {
				return
			}
			continue
		}
		if len(w.mu.aborts) > 0 {
			w.abortLocked()
		}
		now := max(time.Since(w.epoch), next)
		d := w.mu.eng.Step(now)
		w.mu.Unlock()
		if d > 0 {
			next = now + d
			if wait := time.Until(w.epoch.Add(next)); wait > 0 {
				idle.Reset(wait)
				select {
				case <-w.stop:
					return
				case <-idle.C:
				}
			}
		}
		w.mu.Lock()
		// Encode the step's events before delivering its effects: a
		// request that finishes in this step drops its token map entries,
		// which a ZMQ event of its prompt blocks still needs.
		evs := w.mu.eng.Events()
		w.out.encode(w, evs)
		w.rememberLocked(evs)
		w.deliverLocked()
		w.mu.eng.Reset()
		load := w.loadLocked()
		w.mu.Unlock()
		w.out.publish(w)
		pending := w.publishLoad(load, false)
		if d == 0 {
			var retry time.Duration
			if pending {
				retry = w.cfg.LoadInterval - time.Since(w.loadAt)
			}
			if !w.park(idle, retry) {
				return
			}
			if pending && time.Since(w.loadAt) >= w.cfg.LoadInterval {
				w.publishLoad(load, true)
			}
		}
	}
}

// park waits for a submission (or, with retry > 0, at most retry); it
// reports false when the worker stops.
func (w *Worker) park(t *time.Timer, retry time.Duration) bool {
	var tc <-chan time.Time
	if retry > 0 {
		t.Reset(retry)
		tc = t.C
		defer t.Stop()
	}
	select {
	case <-w.stop:
		return false
	case <-w.wake:
	case <-tc:
	}
	return true
}

// restartLocked replaces the engine by an empty one whose first event is
// Cleared.
func (w *Worker) restartLocked() {
	w.mu.restart = false
	for _, c := range w.mu.restarted {
		close(c)
	}
	w.mu.restarted = w.mu.restarted[:0]
	w.failAllLocked(ErrRestarted)
	clear(w.mu.toks)
	clear(w.mu.kept)
	w.mu.eng = w.newEngine()
	w.mu.eng.KV().Clear()
	w.resetRingLocked()
}

// deliverLocked hands the last step's effects and progress to the calls.
func (w *Worker) deliverLocked() {
	eng := w.mu.eng
	last := eng.LastStep()
	end := last.At + last.Duration
	w.mu.clock = end
	for _, ef := range eng.Effects() {
		c := w.mu.calls[ef.Request]
		if c == nil {
			continue
		}
		switch ef.Kind {
		case engine.FirstToken:
			c.first, c.cached = true, ef.CachedTokens
			c.advance(max(c.emitted, ef.OutputTokens), ef.At)
			notify(c)
		case engine.Finished:
			c.first, c.cached = true, ef.CachedTokens
			c.advance(ef.OutputTokens, ef.At)
			w.endLocked(c, nil)
		}
	}
	kv := eng.KV()
	for _, c := range w.mu.calls {
		if !c.first {
			continue
		}
		if n, ok := kv.Tokens(c.id); ok {
			if p := min(n-c.prompt+1, c.max-1); p > c.emitted {
				c.advance(p, end)
				notify(c)
			}
		}
	}
}

// traceCalls gives every call submitted from now on a callTrace, for tests.
func (w *Worker) traceCalls() {
	w.mu.Lock()
	w.mu.tracing = true
	w.mu.Unlock()
}

// tracedCalls returns copies of the traces of the calls submitted since
// traceCalls, in submission order.
func (w *Worker) tracedCalls() []callTrace {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]callTrace, len(w.mu.traces))
	for i, t := range w.mu.traces {
		out[i] = callTrace{made: slices.Clone(t.made), sent: slices.Clone(t.sent)}
	}
	return out
}

func (w *Worker) loadLocked() plane.Load {
	used, total := w.mu.eng.KV().Usage()
	waiting, running := w.mu.eng.Load()
	return plane.Load{WorkerID: w.cfg.ID, DpRank: w.rank, KVUsed: used, KVTotal: total, Waiting: waiting, Running: running}
}

// publishLoad publishes l if it changed and LoadInterval has passed since the
// last message (or force); it reports whether a change is still unpublished.
func (w *Worker) publishLoad(l plane.Load, force bool) bool {
	if w.nc == nil || w.cfg.Subjects.Load == "" || (w.loadSet && l == w.lastLoad) {
		return false
	}
	if !force && time.Since(w.loadAt) < w.cfg.LoadInterval {
		return true
	}
	w.lastLoad, w.loadAt, w.loadSet = l, time.Now(), true
	if err := w.nc.Publish(w.cfg.Subjects.Load, plane.Encode(&l)); err != nil {
		w.cfg.Logger.Warn("mock: publish load", "worker", w.cfg.ID, "err", err)
	}
	return false
}
