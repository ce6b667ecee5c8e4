package mock

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/bench/engine"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/plane"
)

// Config configures a Fleet (plain data, copied by Start). Zero fields take
// the defaults noted; Validate reports the invalid ones.
type Config struct {
	Workers          int      // number of workers (> 0)
	WorkerIDs        []uint64 // worker ids; default 1..Workers
	Host             string   // default 127.0.0.1
	Port             int      // worker i listens on Port+i; 0: random ports
	BlockSize        int      // default 16
	KVBlocks         int      // per worker; default 16384
	HostKVBlocks     int      // per worker: host tier behind the device (WorkerConfig.HostKVBlocks); 0: none
	HostGBps         float64  // host tier onload bandwidth; default engine.DefaultHostGBps
	MaxNumSeqs       int      // default 256
	MaxBatchedTokens int      // default 8192
	Speedup          float64  // default 1
	Perf             engine.Perf
	Namespace        string              // default "kvroute"
	Component        string              // default "backend"
	Transport        string              // plane.Transport*; default dynamo
	ZMQPort          int                 // with zmq: worker i's rank r publishes on ZMQPort+2·DPSize·i+r, replays DPSize ports higher; 0: random
	DPSize           int                 // dp ranks per worker (WorkerConfig.DPSize); default 1
	Model            string              // default "mock"
	ChatTemplate     openai.ChatTemplate // chat messages' template (see WorkerConfig); nil: ChatML
	Heartbeat        time.Duration       // default 1s
	LoadInterval     time.Duration       // minimum gap between a worker's load messages; default 50ms
	DropFraction     float64             // fault switches, see WorkerConfig
	DupFraction      float64
	Seed             uint64
	RecoveryRing     int // KV events kept per worker for recovery; default DefaultRecoveryRing, < 0: none
	Logger           *slog.Logger
	Tokenizer        openai.Tokenizer // text prompts and chat; default bytes (see WorkerConfig)
	// Disaggregated serving, for every worker of the fleet (see
	// WorkerConfig; a P/D fleet is a prefill fleet and a decode fleet
	// with distinct WorkerIDs).
	Role             string        // --role: prefill, decode or both (default)
	PDProtocol       string        // --pd-protocol: vllm-nixl (default) or sglang
	TransferGBps     float64       // --transfer-gbps; default DefaultTransferGBps
	TransferTimeout  time.Duration // --transfer-timeout; default DefaultTransferTimeout
	BootstrapTimeout time.Duration // --bootstrap-timeout; default DefaultBootstrapTimeout

	// AnnounceBlockSize is every worker's WorkerConfig.AnnounceBlockSize
	// (kvroute mock --announce-block-size).
	AnnounceBlockSize int
}

// Validate checks the configuration; errors name the field's flag.
func (c *Config) Validate() error {
	var errs []error
	if c.Workers <= 0 {
		errs = append(errs, fmt.Errorf("--workers must be > 0 (got %d)", c.Workers))
	}
	if len(c.WorkerIDs) > 0 && len(c.WorkerIDs) != c.Workers {
		errs = append(errs, fmt.Errorf("--worker-ids lists %d ids for %d workers", len(c.WorkerIDs), c.Workers))
	}
	seen := map[uint64]bool{}
	for _, id := range c.WorkerIDs {
		if id == 0 {
			errs = append(errs, errors.New("--worker-ids: ids must be > 0"))
		} else if seen[id] {
			errs = append(errs, fmt.Errorf("--worker-ids: id %d repeated", id))
		}
		seen[id] = true
	}
	if c.Port < 0 || c.Port+c.Workers > 65536 {
		errs = append(errs, fmt.Errorf("--port %d: ports %d..%d out of range", c.Port, c.Port, c.Port+c.Workers-1))
	}
	if c.DPSize < 0 || c.DPSize > MaxDPSize {
		errs = append(errs, fmt.Errorf("--dp-size must be in [1, %d] (got %d)", MaxDPSize, c.DPSize))
	}
	if c.ZMQPort < 0 || c.ZMQPort+2*max(c.DPSize, 1)*c.Workers > 65536 {
		errs = append(errs, fmt.Errorf("--zmq-port %d: ports out of range for %d workers", c.ZMQPort, c.Workers))
	}
	if c.HostGBps < 0 {
		errs = append(errs, fmt.Errorf("--host-gbps must be > 0 (got %g)", c.HostGBps))
	}
	for name, v := range map[string]int{"block-size": c.BlockSize, "kv-blocks": c.KVBlocks, "host-kv-blocks": c.HostKVBlocks, "max-num-seqs": c.MaxNumSeqs, "max-batched-tokens": c.MaxBatchedTokens} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("--%s must be > 0 (got %d)", name, v))
		}
	}
	if c.Speedup < 0 {
		errs = append(errs, fmt.Errorf("--speedup must be > 0 (got %g)", c.Speedup))
	}
	if c.Heartbeat < 0 {
		errs = append(errs, fmt.Errorf("--heartbeat must be > 0 (got %v)", c.Heartbeat))
	}
	if c.LoadInterval < 0 {
		errs = append(errs, fmt.Errorf("--load-interval must be > 0 (got %v)", c.LoadInterval))
	}
	for name, v := range map[string]float64{"drop-events": c.DropFraction, "duplicate-events": c.DupFraction} {
		if v < 0 || v > 1 {
			errs = append(errs, fmt.Errorf("--%s must be in [0, 1] (got %g)", name, v))
		}
	}
	if c.Role != "" && !validRole(c.Role) {
		errs = append(errs, fmt.Errorf("--role %q: want prefill, decode or both", c.Role))
	}
	if c.PDProtocol != "" && !validProtocol(c.PDProtocol) {
		errs = append(errs, fmt.Errorf("--pd-protocol %q: want vllm-nixl or sglang", c.PDProtocol))
	}
	if c.TransferGBps < 0 {
		errs = append(errs, fmt.Errorf("--transfer-gbps must be > 0 (got %g)", c.TransferGBps))
	}
	for name, v := range map[string]time.Duration{"transfer-timeout": c.TransferTimeout, "bootstrap-timeout": c.BootstrapTimeout} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("--%s must be > 0 (got %v)", name, v))
		}
	}
	switch c.Transport {
	case "", plane.TransportDynamo, plane.TransportNative, plane.TransportZMQ, plane.TransportNone:
	default:
		errs = append(errs, fmt.Errorf("--event-transport %q: want dynamo, native, zmq or none", c.Transport))
	}
	ns, comp := c.names()
	if _, err := plane.SubjectsFor(ns, comp); err != nil {
		errs = append(errs, fmt.Errorf("--namespace/--component: %w", err))
	}
	return errors.Join(errs...)
}

func (c *Config) names() (ns, comp string) {
	ns, comp = c.Namespace, c.Component
	if ns == "" {
		ns = "kvroute"
	}
	if comp == "" {
		comp = "backend"
	}
	return ns, comp
}

// Fleet is N workers in one process sharing one NATS connection. Its
// methods are goroutine-safe; the zero value is not usable, use Start.
// Workers returns a slice owned by the fleet: do not modify it.
type Fleet struct {
	workers []*Worker
	byID    map[uint64]*Worker
}

// Start validates cfg and starts its workers; nc may be nil only with the
// zmq or none transports (then nothing goes to NATS). On error the workers
// already started are closed.
func Start(cfg Config, nc *nats.Conn) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ns, comp := cfg.names()
	subj, _ := plane.SubjectsFor(ns, comp)
	f := &Fleet{byID: map[uint64]*Worker{}}
	for i := range cfg.Workers {
		id := uint64(i + 1)
		if len(cfg.WorkerIDs) > 0 {
			id = cfg.WorkerIDs[i]
		}
		wc := WorkerConfig{
			ID: id, Host: cfg.Host, BlockSize: cfg.BlockSize, AnnounceBlockSize: cfg.AnnounceBlockSize, KVBlocks: cfg.KVBlocks, HostKVBlocks: cfg.HostKVBlocks, HostGBps: cfg.HostGBps,
			MaxNumSeqs: cfg.MaxNumSeqs, MaxBatchedTokens: cfg.MaxBatchedTokens, Speedup: cfg.Speedup, Perf: cfg.Perf,
			Model: cfg.Model, ChatTemplate: cfg.ChatTemplate, Transport: cfg.Transport, Subjects: subj, Heartbeat: cfg.Heartbeat, LoadInterval: cfg.LoadInterval,
			DropFraction: cfg.DropFraction, DupFraction: cfg.DupFraction, Seed: cfg.Seed, RecoveryRing: cfg.RecoveryRing, Logger: cfg.Logger,
			Tokenizer: cfg.Tokenizer, DPSize: cfg.DPSize,
			Role: cfg.Role, PDProtocol: cfg.PDProtocol, TransferGBps: cfg.TransferGBps,
			TransferTimeout: cfg.TransferTimeout, BootstrapTimeout: cfg.BootstrapTimeout,
		}
		if cfg.Port > 0 {
			wc.Port = cfg.Port + i
		}
		if cfg.ZMQPort > 0 {
			wc.ZMQPort = cfg.ZMQPort + 2*max(cfg.DPSize, 1)*i
		}
		w, err := StartWorker(wc, nc)
		if err != nil {
			f.Close() //nolint:errcheck // reporting the start error
			return nil, err
		}
		f.workers = append(f.workers, w)
		f.byID[id] = w
	}
	return f, nil
}

// Workers returns the workers in start order.
func (f *Fleet) Workers() []*Worker { return f.workers }

// Worker returns the worker with id, or nil.
func (f *Fleet) Worker(id uint64) *Worker { return f.byID[id] }

// Close closes every worker (each publishes its leave message).
func (f *Fleet) Close() error {
	var errs []error
	for _, w := range f.workers {
		if err := w.Close(); err != nil {
			errs = append(errs, fmt.Errorf("worker %d: %w", w.ID(), err))
		}
	}
	return errors.Join(errs...)
}
