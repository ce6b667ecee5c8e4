package router

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/plane"
	"github.com/kvroute/kvroute/wire/proxy"
)

// StaticWorker is a worker that does not register itself (--worker ID=URL).
type StaticWorker struct {
	ID  uint64
	URL string // http://host:port
	// DpRanks the worker serves; nil means rank 0 only.
	DpRanks []uint32
	// Model the worker serves (--worker ...,model=NAME). Empty: the router
	// asks the worker (GET URL/v1/models) once it answers.
	Model string
	// Capacity of each rank, if known (zero fields are unknown);
	// Capacity.Role is its part in disaggregated serving (--worker
	// ...,role=prefill|decode|both; default both).
	Capacity sched.Capacity
	// PDProtocol is how the worker takes part in a disaggregated request
	// (--worker ...,pd_protocol=vllm-nixl|sglang): plane.ProtocolVLLMNIXL
	// (the default, "") or plane.ProtocolSGLang.
	PDProtocol string
	// BootstrapPort is an SGLang prefill worker's disaggregation bootstrap
	// port (--worker ...,bootstrap_port=N); 0: not declared (the legs carry
	// null and the engine uses its own default).
	BootstrapPort int
}

// DefaultMaxHeaderBytes is the default of Config.MaxHeaderBytes: room for
// long Authorization tokens and tracing headers, where fasthttp's own 4 KiB
// default is tight; nginx allows 8 KiB per header line.
const DefaultMaxHeaderBytes = 16 << 10

// Defaults of the bounds. Unbounded, each was exhausted by one client or
// one forged control message.
const (
	// DefaultMaxWorkers is far above any fleet one router serves (the
	// scheduler scans every rank per decision) and far below the 10,000
	// forged registrations that broke every request.
	DefaultMaxWorkers = 1024
	// DefaultMaxPromptTokens: 1 Mi tokens, above the longest context of
	// today's served models; a worker declaring max_model_len has that
	// instead.
	DefaultMaxPromptTokens = 1 << 20
	// DefaultMaxConns: 4,096 connections × 16 KiB read buffers = 64 MiB.
	DefaultMaxConns = 4096
	// DefaultMaxInflightBodyBytes: 256 MiB of bodies at once, 16 bodies at
	// the default --max-body-bytes (50 trickled 16 MiB bodies took 847 MB).
	DefaultMaxInflightBodyBytes = 256 << 20
)

// Config configures a Router. It is plain data, copied by New; zero fields
// take the defaults noted.
type Config struct {
	// TenantsPath is the --tenants file (tenants.go): tenants' weights,
	// rate limits, default classes and API-key hashes. It is re-read when
	// it changes. Empty: every request's tenant is its header's or model's,
	// unlimited, of weight 1.
	TenantsPath string
	// Sched is the scheduler's configuration; Sched.BlockSize is the engines'
	// KV block size (--block-size): a registration with another block size
	// is rejected and counted.
	Sched sched.Config
	// Seed seeds the scheduler's RNG (--seed). Default 0 (a fixed seed).
	Seed uint64
	// Approx records decisions in the index (approximate mode,
	// --no-kv-events) instead of relying on the engines' KV events.
	Approx bool
	// Tokenizer turns text prompts into tokens (--tokenizer): bytes, or a
	// Hugging Face tokenizer (prompt/tokenizer) matching the engines'. Default
	// bytes.
	Tokenizer openai.Tokenizer
	// ChatTemplate renders chat messages into the prompt text that is
	// tokenized (--chat-template, or the chat_template of --tokenizer's
	// tokenizer_config.json); ModelChatTemplates override it per model
	// (--model-chat-template MODEL=FILE). Neither: ChatML (see wire/openai).
	ChatTemplate       openai.ChatTemplate
	ModelChatTemplates map[string]openai.ChatTemplate
	// ModelTokenizers are per-model tokenizers (--model-tokenizer
	// MODEL=PATH): a request whose "model" is listed is tokenized with its
	// own, any other with Tokenizer.
	ModelTokenizers map[string]openai.Tokenizer
	// ForwardTokenIDs sends a /v1/completions text prompt to the worker as
	// the token ids the router hashed (--forward-token-ids), so router and
	// engine cannot tokenize it differently. vLLM and SGLang take a
	// token-id prompt.
	ForwardTokenIDs bool
	// EagleWindows (--eagle-windows) hashes as Dynamo does for EAGLE
	// workers (SGLang speculative decoding, bigram pages): block i of a
	// request is the window of BlockSize+1 tokens from i × BlockSize
	// (wire.LocalHashesEagle), and the ZMQ events' bigram pages the same
	// way (wire.VLLMConfig.EagleWindows), so a page matches only when the
	// token after it does too. Serve copies it to Node.EagleWindows; the
	// two sides must agree, so it is one switch for the whole fleet.
	// Requests declaring multimodal objects keep the plain hashing.
	EagleWindows bool
	// Workers are static workers, known from the start.
	Workers []StaticWorker
	// Subjects are the control-plane subjects (registrations, load metrics,
	// all-workers-busy) of the namespace and component served.
	Subjects plane.Subjects
	// ID names this replica in the AllWorkersBusy messages it publishes; a
	// replica ignores its own. Default "kvroute-<pid>-<random>".
	ID string
	// Peers are the ids (--router-id) of the other replicas whose
	// AllWorkersBusy messages this one honours (--router-peers); "*"
	// honours any (for a NATS account where only routers may publish
	// all-workers-busy). Empty: none; remote messages are counted and
	// ignored (kvroute_refused_total{reason="busy_unknown_router"}).
	Peers []string

	// Sync shares active load with the other replicas
	// (--router-replica-sync): this router publishes its bookings on
	// plane.SyncSubject and books theirs in its scheduler (see sync.go).
	// With Peers set, only the listed replicas' bookings are applied.
	Sync bool
	// SyncInterval is how often waiting bookings are published
	// (--router-sync-interval). Default DefaultSyncInterval.
	SyncInterval time.Duration
	// SyncExpiry is how long another replica may stay silent before its
	// bookings are dropped (--router-sync-expiry); this router sends a
	// heartbeat every SyncExpiry/4. Default DefaultSyncExpiry.
	SyncExpiry time.Duration

	// MaxWorkers bounds the registered workers (--max-workers); a new
	// worker beyond it is refused and counted. Default DefaultMaxWorkers.
	MaxWorkers int
	// MaxDpRanks bounds the dp ranks of one registration (--max-dp-ranks).
	// Default plane.DefaultMaxDpRanks.
	MaxDpRanks int
	// MaxPromptTokens refuses longer prompts with 400
	// (--max-prompt-tokens), whatever the workers declare; a worker
	// declaring a shorter max_model_len gets only the prompts within it.
	// 0: each worker's declared max_model_len, or DefaultMaxPromptTokens
	// for a worker declaring none; a prompt goes only to the workers whose
	// limit it fits.
	MaxPromptTokens int

	// BatchMax is the largest batch of requests decided at once. Default 256.
	BatchMax int
	// QueueSize is the capacity of the handler → batcher queue. Default 4096.
	QueueSize int
	// QueueTimeout bounds how long a request may wait for a worker when
	// every worker is busy (--queue-timeout); it is then answered 503.
	// Default 30 s.
	QueueTimeout time.Duration
	// TickInterval is the period of the scheduler's Tick, registration expiry
	// and tree-size refresh. Default 100 ms.
	TickInterval time.Duration

	// MaxBodyBytes limits a request body (--max-body-bytes). Default 16 MiB.
	MaxBodyBytes int
	// MaxHeaderBytes limits a request's line and headers
	// (--max-header-bytes; fasthttp's ReadBufferSize, allocated per
	// connection); beyond it: 431. Default 16 KiB.
	MaxHeaderBytes int
	// ReadTimeout bounds reading a request's line, headers and body
	// (--http-read-timeout); shorter than a streamed answer may last (the
	// write side has no such bound). Default 10 s.
	ReadTimeout time.Duration
	// MaxConns bounds the open API connections (--max-conns; fasthttp's
	// Concurrency): beyond it a new connection gets 503 and is closed.
	// Default DefaultMaxConns.
	MaxConns int
	// MaxInflightBodyBytes bounds the request bodies being read or held at
	// once, in declared Content-Length bytes (--max-inflight-body-bytes):
	// a request whose body does not fit gets 503 before its body is read.
	// Default DefaultMaxInflightBodyBytes.
	MaxInflightBodyBytes int64
	// IdleTimeout closes idle keep-alive connections. Default 2 min.
	IdleTimeout time.Duration
	// Proxy configures the client that forwards requests to workers
	// (Proxy.FirstByteTimeout: --worker-first-byte-timeout).
	Proxy proxy.Config

	// EjectAfter is the number of consecutive transport failures (dial
	// refused or timed out, no first byte in time, connection closed before
	// the answer) after which a worker is marked down and taken out of
	// routing (--worker-eject-failures). Default 1: a request that failed is
	// retried elsewhere at once, and the next would most likely fail too.
	EjectAfter int
	// ProbeInterval is the first wait before a down worker's GET /health is
	// asked; it doubles after every failed probe up to ProbeMaxInterval
	// (--worker-probe-interval, --worker-probe-max-interval). Defaults 1 s
	// and 30 s.
	ProbeInterval, ProbeMaxInterval time.Duration
	// ProbeTimeout bounds one health probe. Default 2 s.
	ProbeTimeout time.Duration
	// ForgetAfter is how long a worker may stay down before its blocks are
	// dropped from the index (it most likely restarted with an empty cache).
	// Default 5 min.
	ForgetAfter time.Duration

	// PrefillTimeout bounds a disaggregated request's prefill leg
	// (--prefill-timeout): past it, or on any failure of the leg, the
	// request is served aggregated on its decode worker. Default
	// DefaultPrefillTimeout.
	PrefillTimeout time.Duration

	Logger *slog.Logger
	// VerifyRepairInterval is the least time between two dumps asked of
	// one dp rank because its cached-token reports disagree with the index
	// (--verify-repair-interval; default 5 s).
	VerifyRepairInterval time.Duration
	// DecisionRing is the number of recent decisions kept for
	// /debug/decisions (--decision-ring, rounded up to a power of two; default 1024); one in
	// DecisionSample (--decision-sample; default 100) is decided with
	// every candidate's cost and logged at debug level.
	DecisionRing, DecisionSample int
}

func (c *Config) fill() {
	if c.Tokenizer == nil {
		c.Tokenizer = openai.BytesTokenizer{}
	}
	if _, ok := c.Tokenizer.(*openai.ModelTokenizers); !ok && len(c.ModelTokenizers) > 0 {
		c.Tokenizer = &openai.ModelTokenizers{Default: c.Tokenizer, ByModel: c.ModelTokenizers}
	}
	if c.BatchMax <= 0 {
		c.BatchMax = 256
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 4096
	}
	if c.QueueTimeout <= 0 {
		c.QueueTimeout = 30 * time.Second
	}
	if c.TickInterval <= 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 16 << 20
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 10 * time.Second
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxInflightBodyBytes <= 0 {
		c.MaxInflightBodyBytes = DefaultMaxInflightBodyBytes
	}
	if c.MaxWorkers <= 0 {
		c.MaxWorkers = DefaultMaxWorkers
	}
	if c.MaxDpRanks <= 0 {
		c.MaxDpRanks = plane.DefaultMaxDpRanks
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.EjectAfter <= 0 {
		c.EjectAfter = 1
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = time.Second
	}
	if c.ProbeMaxInterval <= 0 {
		c.ProbeMaxInterval = 30 * time.Second
	}
	c.ProbeMaxInterval = max(c.ProbeMaxInterval, c.ProbeInterval)
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = 2 * time.Second
	}
	if c.ForgetAfter <= 0 {
		c.ForgetAfter = 5 * time.Minute
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = DefaultSyncInterval
	}
	if c.SyncExpiry == 0 {
		c.SyncExpiry = DefaultSyncExpiry
	}
	if c.PrefillTimeout <= 0 {
		c.PrefillTimeout = DefaultPrefillTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the configuration; errors name the flag.
func (c *Config) Validate() error {
	if err := c.Sched.Validate(); err != nil {
		return err
	}
	seen := map[uint64]bool{}
	for _, w := range c.Workers {
		if seen[w.ID] {
			return fmt.Errorf("--worker: worker %d given twice", w.ID)
		}
		seen[w.ID] = true
		if w.URL == "" {
			return fmt.Errorf("--worker: worker %d has no URL", w.ID)
		}
		maxRanks := c.MaxDpRanks
		if maxRanks <= 0 {
			maxRanks = plane.DefaultMaxDpRanks
		}
		if len(w.DpRanks) > maxRanks {
			return fmt.Errorf("--worker: worker %d has %d dp ranks, more than --max-dp-ranks %d", w.ID, len(w.DpRanks), maxRanks)
		}
		if err := checkStaticPD(w); err != nil {
			return err
		}
	}
	if c.ProbeMaxInterval > 0 && c.ProbeMaxInterval < c.ProbeInterval {
		return fmt.Errorf("--worker-probe-max-interval %v is shorter than --worker-probe-interval %v", c.ProbeMaxInterval, c.ProbeInterval)
	}
	if c.MaxInflightBodyBytes > 0 && c.MaxBodyBytes > 0 && c.MaxInflightBodyBytes < int64(c.MaxBodyBytes) {
		return fmt.Errorf("--max-inflight-body-bytes %d is smaller than --max-body-bytes %d: no body of the allowed size could be read", c.MaxInflightBodyBytes, c.MaxBodyBytes)
	}
	if c.MaxPromptTokens < 0 {
		return fmt.Errorf("--max-prompt-tokens %d must be >= 0", c.MaxPromptTokens)
	}
	for _, p := range c.Peers {
		if p == "" {
			return errors.New("--router-peers: empty router id")
		}
	}
	if c.SyncInterval < 0 {
		return fmt.Errorf("--router-sync-interval %v must be positive", c.SyncInterval)
	}
	if c.SyncExpiry < 0 {
		return fmt.Errorf("--router-sync-expiry %v must be positive", c.SyncExpiry)
	}
	if c.SyncInterval > 0 && c.SyncExpiry > 0 && 4*c.SyncInterval > c.SyncExpiry {
		return fmt.Errorf("--router-sync-interval %v must be at most a quarter of --router-sync-expiry %v (a heartbeat goes out every expiry/4)", c.SyncInterval, c.SyncExpiry)
	}
	if c.Subjects.Heartbeat == "" {
		return errors.New("router: Subjects not set (use plane.SubjectsFor with --namespace and --component)")
	}
	return nil
}
