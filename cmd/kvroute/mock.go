package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/bench/engine"
	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/internal/natsembed"
	"github.com/kvroute/kvroute/prompt"
	"github.com/kvroute/kvroute/prompt/chattmpl"
	"github.com/kvroute/kvroute/wire/plane"
)

func runMock(args []string) error {
	fs := newFlagSet("kvroute mock")
	var (
		workers   = fs.Int("workers", 8, "simulated workers")
		ids       = fs.String("worker-ids", "", "comma-separated worker ids, one per worker (default 1..workers)")
		host      = fs.String("host", "127.0.0.1", "listen host for HTTP and ZMQ")
		port      = fs.Int("port", 9100, "worker i serves HTTP on port+i (0: random ports)")
		natsURL   = fs.String("nats", "", "NATS URL; empty embeds a nats-server and prints its URL")
		natsPort  = fs.Int("nats-port", 0, "port of the embedded nats-server (0: random)")
		dataDir   = fs.String("data-dir", "", "JetStream store of the embedded nats-server (default: a temporary directory)")
		blockSize = fs.Int("block-size", 16, "engine KV block size in tokens")
		kvBlocks  = fs.Int("kv-blocks", 16384, "KV cache blocks per worker")
		hostKV    = fs.Int("host-kv-blocks", 0, "host-memory KV blocks per worker behind the GPU's (0: no host tier): evicted blocks are offloaded there (events with medium CPU / storage tier host) and onloaded instead of recomputed")
		hostGBps  = fs.Float64("host-gbps", engine.DefaultHostGBps, "host tier onload bandwidth in GB/s (a block costs block-size × 128 KiB / bandwidth)")
		maxSeqs   = fs.Int("max-num-seqs", 256, "running requests per worker at most (vLLM max_num_seqs)")
		maxBatch  = fs.Int("max-batched-tokens", 8192, "tokens per engine step at most (vLLM max_num_batched_tokens)")
		speedup   = fs.Float64("speedup", 1, "divide every step time by this factor")
		model     = fs.String("model", "mock", "model name (ZMQ topic kv@<worker>@<model>, default response model)")
		transport = fs.String("event-transport", plane.TransportDynamo, "KV events: dynamo (msgpack on NATS), native (kvroute binary on NATS), zmq (vLLM PUB + replay) or none")
		zmqPort   = fs.Int("zmq-port", 5557, "with zmq: worker i publishes on zmq-port+2i and replays on zmq-port+2i+1; with --dp-size N, rank r of worker i publishes on zmq-port+2Ni+r and replays on zmq-port+2Ni+N+r (0: random)")
		dpSize    = fs.Int("dp-size", 1, "data-parallel ranks per worker behind its one URL (vLLM --data-parallel-size): an engine and a KV cache of --kv-blocks each; a request goes to the rank in its X-Data-Parallel-Rank header (the router sends it), else to the least loaded rank")
		ns        = fs.String("namespace", "kvroute", "NATS subject namespace")
		comp      = fs.String("component", "backend", "NATS subject component")
		heartbeat = fs.Duration("heartbeat", time.Second, "registration heartbeat interval")
		loadIvl   = fs.Duration("load-interval", 50*time.Millisecond, "minimum gap between a worker's load-metric messages")
		drop      = fs.Float64("drop-events", 0, "fault: fraction of KV event messages dropped (zmq: left to the replay socket)")
		dup       = fs.Float64("duplicate-events", 0, "fault: fraction of KV event messages sent twice")
		announce  = fs.Int("announce-block-size", 0, "fault: the block size the registrations announce instead of --block-size (0: --block-size), as an engine configured apart from its launcher; only the engines' cached-token reports show it")
		seed      = fs.Uint64("seed", 1, "seed of the fault switches")
		ring      = fs.Int("recovery-ring", mock.DefaultRecoveryRing, "KV events each worker keeps to answer routers' recovery requests (NATS transports); older ones are answered with a cache dump; 0: dumps only")
		role      = fs.String("role", "both", "disaggregated prefill/decode role of every worker: prefill (answers the prefill leg and keeps its KV for the decode side), decode (pulls the KV named by the leg, then decodes) or both (aggregated)")
		pdProto   = fs.String("pd-protocol", "vllm-nixl", "with --role prefill or decode: the P/D protocol spoken, vllm-nixl (kv_transfer_params) or sglang (bootstrap_host, bootstrap_port, bootstrap_room)")
		xferGBps  = fs.Float64("transfer-gbps", mock.DefaultTransferGBps, "KV transfer bandwidth between prefill and decode workers in GB/s")
		xferTO    = fs.Duration("transfer-timeout", mock.DefaultTransferTimeout, "how long a prefill worker keeps a prompt's KV for the decode side to pull")
		bootTO    = fs.Duration("bootstrap-timeout", mock.DefaultBootstrapTimeout, "sglang: how long a decode leg waits for its prefill to arrive")
		verbose   = fs.Bool("v", false, "log warnings to stderr")
		chatTmpl  = fs.String("chat-template", "", "render chat messages with this chat template (a tokenizer_config.json, a directory holding one, or a Jinja file), as the router's --chat-template; empty: ChatML")
		tokenizer = fs.String("tokenizer", "bytes", "tokenizer of text prompts and chat: bytes (one token per UTF-8 byte) or the path of a Hugging Face tokenizer.json or of its directory; give the router the same")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg := mock.Config{
		Workers: *workers, Host: *host, Port: *port, BlockSize: *blockSize, KVBlocks: *kvBlocks, HostKVBlocks: *hostKV, HostGBps: *hostGBps,
		MaxNumSeqs: *maxSeqs, MaxBatchedTokens: *maxBatch, Speedup: *speedup, Namespace: *ns, Component: *comp,
		Transport: *transport, ZMQPort: *zmqPort, Model: *model, Heartbeat: *heartbeat, LoadInterval: *loadIvl,
		DropFraction: *drop, DupFraction: *dup, Seed: *seed, RecoveryRing: *ring, DPSize: *dpSize, AnnounceBlockSize: *announce,
		Role: *role, PDProtocol: *pdProto, TransferGBps: *xferGBps, TransferTimeout: *xferTO, BootstrapTimeout: *bootTO,
	}
	if *dpSize < 1 || *dpSize > mock.MaxDPSize {
		return fmt.Errorf("--dp-size must be in [1, %d] (got %d)", mock.MaxDPSize, *dpSize)
	}
	if *ring < 0 {
		return fmt.Errorf("--recovery-ring must be >= 0 (got %d)", *ring)
	}
	if *chatTmpl != "" {
		t, err := chattmpl.Load(*chatTmpl)
		if err != nil {
			return fmt.Errorf("--chat-template: %w", err)
		}
		cfg.ChatTemplate = t
	}
	tok, err := prompt.NewTokenizer(*tokenizer)
	if err != nil {
		return fmt.Errorf("--tokenizer: %w", err)
	}
	cfg.Tokenizer = tok
	if *ring == 0 {
		cfg.RecoveryRing = -1 // mock.Config: negative is no ring
	}
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if *ids != "" {
		for _, s := range strings.Split(*ids, ",") {
			id, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil {
				return fmt.Errorf("--worker-ids: %q is not a worker id: %v", s, err)
			}
			cfg.WorkerIDs = append(cfg.WorkerIDs, id)
		}
	}
	if *speedup <= 0 {
		return fmt.Errorf("--speedup must be > 0 (got %g)", *speedup)
	}
	if *natsPort < 0 || *natsPort > 65535 {
		return fmt.Errorf("--nats-port %d out of range", *natsPort)
	}
	if *announce < 0 {
		return fmt.Errorf("--announce-block-size must be >= 0 (got %d)", *announce)
	}
	if *hostKV < 0 {
		return fmt.Errorf("--host-kv-blocks must be >= 0 (got %d)", *hostKV)
	}
	if *hostGBps <= 0 {
		return fmt.Errorf("--host-gbps must be > 0 (got %g)", *hostGBps)
	}
	for name, v := range map[string]int{"block-size": *blockSize, "kv-blocks": *kvBlocks, "max-num-seqs": *maxSeqs, "max-batched-tokens": *maxBatch} {
		if v <= 0 {
			return fmt.Errorf("--%s must be > 0 (got %d)", name, v)
		}
	}
	if *heartbeat <= 0 || *loadIvl <= 0 {
		return fmt.Errorf("--heartbeat and --load-interval must be > 0 (got %v, %v)", *heartbeat, *loadIvl)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}

	url := *natsURL
	if url == "" {
		s, err := natsembed.Open(natsembed.Config{Host: *host, Port: *natsPort, StoreDir: *dataDir})
		if err != nil {
			return err
		}
		defer s.Close()
		url = s.ClientURL()
		fmt.Printf("nats %s (embedded, store %s)\n", url, s.Dir)
	}
	nc, err := nats.Connect(url, nats.Name("kvroute-mock"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("--nats %s: %w", url, err)
	}
	defer nc.Close()

	f, err := mock.Start(cfg, nc)
	if err != nil {
		return err
	}
	for _, w := range f.Workers() {
		line := fmt.Sprintf("worker %d %s", w.ID(), w.URL())
		if n := w.DPSize(); n > 1 {
			line += fmt.Sprintf(" dp ranks 0-%d", n-1)
		}
		if e := w.ZMQEndpoint(); e != "" {
			line += fmt.Sprintf(" zmq %s replay %s topic %s", e, w.ZMQReplay(), w.Topic())
		}
		fmt.Println(line)
	}
	fmt.Printf("ready: %d workers, events %s on namespace.%s.component.%s\n", len(f.Workers()), *transport, *ns, *comp)

	stop, stopSignals := shutdownSignals("kvroute mock")
	defer stopSignals()
	<-stop
	fmt.Println("shutting down")
	err = f.Close()
	if ferr := nc.Flush(); err == nil {
		err = ferr
	}
	return err
}
