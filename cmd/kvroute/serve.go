package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/internal/cpuset"
	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/prompt"
	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/plane"
	"github.com/kvroute/kvroute/wire/proxy"
	"github.com/kvroute/kvroute/wire/zmq"
)

// serveOptions are `kvroute serve`'s flags that do not map one to one onto
// the service's configuration.
type serveOptions struct {
	demoFleet     int
	demoTransport string
	demoSpeedup   float64
	demoKVBlocks  int
	// --demo-fleet-pd P,D and --demo-fleet-pd-protocol (serve_pd.go).
	demoPrefill, demoDecode int
	demoPDProtocol          string
	logLevel                string
	namespace               string
	component               string
	// tokenizerFrom and chatFrom say which tokenizer and chat template
	// were loaded, and from where (logged at start).
	tokenizerFrom, chatFrom string
	// attach, when set, starts more on the running service (kvroute epp's
	// ext_proc listener); what it returns is stopped before the drain.
	attach func(svc *router.Service, logger *slog.Logger) (stop func(), err error)
}

// flagExt lets another subcommand reuse serve's flags (kvroute indexer):
// add defines its own flags on serve's set (and may replace the usage),
// check runs on the parsed set before anything else is validated.
type flagExt struct {
	name  string
	add   func(fs *flag.FlagSet)
	check func(fs *flag.FlagSet, args []string) error
}

// serveConfig parses `kvroute serve` flags into a ServiceConfig, checking
// every field and the rules across them; errors name the flags. An ext
// reuses the parsing for another subcommand.
func serveConfig(args []string, ext ...flagExt) (router.ServiceConfig, serveOptions, error) {
	name := "kvroute serve"
	if len(ext) > 0 {
		name = ext[0].name
	}
	fs := newFlagSet(name)
	var (
		httpAddr   = fs.String("http-addr", "127.0.0.1:8000", "API listen address (OpenAI proxy and decision API)")
		blockSize  = fs.Int("block-size", 16, "the engines' KV block size in tokens; registrations and events with another size are rejected")
		natsURL    = fs.String("nats", "", "NATS URL; empty embeds a nats-server (JetStream on)")
		natsCreds  = fs.String("nats-creds", "", "NATS credentials file (with --nats)")
		natsCA     = fs.String("nats-tls-ca", "", "CA certificate for NATS TLS (with --nats)")
		natsCert   = fs.String("nats-tls-cert", "", "client certificate for NATS TLS (with --nats-tls-key)")
		natsKey    = fs.String("nats-tls-key", "", "client key for NATS TLS (with --nats-tls-cert)")
		dataDir    = fs.String("data-dir", "", "JetStream store of the embedded nats-server (default: a temporary directory)")
		natsPort   = fs.Int("nats-port", 0, "port of the embedded nats-server on 127.0.0.1 (0: random)")
		ns         = fs.String("namespace", "kvroute", "NATS subject namespace")
		comp       = fs.String("component", "backend", "NATS subject component")
		mode       = fs.String("router-mode", "kv", "worker selection: kv, round-robin, random or least-loaded")
		evJS       = fs.Bool("events-jetstream", false, "keep KV events in a JetStream stream, read to catch up after a restart or reconnection (nothing the stream holds is lost; live events still come from core NATS with --events-live, see docs/operations.md); false: core NATS subscriptions only")
		evLive     = fs.Bool("events-live", true, "JetStream: take live KV events from core NATS subscriptions (as fast as without the stream) and read the stream only to catch up, at start and after a reconnection; false: consume every event from the stream")
		evMaxAge   = fs.Duration("events-max-age", ingest.DefaultStreamMaxAge, "JetStream: KV events older than this are dropped from the stream")
		evMaxBytes = byteSize(ingest.DefaultStreamMaxBytes)
		evReplicas = fs.Int("events-replicas", 1, "JetStream: replicas of the KV-event stream (1, or 3 in a NATS cluster)")
		jsWait     = fs.Duration("jetstream-wait", node.DefaultJetStreamWait, "JetStream: how long start-up waits for JetStream to answer (a cluster still electing its leader), retrying with backoff; /health answers 503 \"starting: waiting for JetStream\" meanwhile")
		snapBucket = fs.String("snapshot-bucket", "", "JetStream: keep index snapshots in this NATS object store bucket (created if missing) and restore the current one at start (empty: off; needs --events-jetstream)")
		snapIvl    = fs.Duration("snapshot-interval", node.DefaultSnapshotInterval, "time between index snapshots (with --snapshot-bucket)")
		snapEvents = fs.Uint64("snapshot-events", node.DefaultSnapshotEvents, "also take an index snapshot after this many KV-event stream messages since the last one (with --snapshot-bucket)")
		noEvents   = fs.Bool("no-kv-events", false, "approximate mode: no KV events; the router records its own decisions in the index with a TTL")
		approxTTL  = fs.Duration("approx-ttl", shard.DefaultTTL, "approximate mode: how long a routed prefix is assumed cached (refreshed on reuse)")
		approxMax  = fs.Int("approx-max-blocks", shard.DefaultMaxBlocks, "approximate mode: blocks recorded per shard before the oldest are pruned")
		qTimeout   = fs.Duration("queue-timeout", 30*time.Second, "a request waiting for a free worker longer than this gets 503")
		tenantsF   = fs.String("tenants", "", "YAML file of tenants: weight, rate and burst (prompt tokens per second), default class, api_keys (SHA-256 hashes of bearer tokens); re-read when it changes (README, Tenants, priorities and sessions)")
		sessTTL    = fs.Duration("session-ttl", 5*time.Minute, "a request with X-Session-ID (or X-Dynamo-Session-ID) prefers the rank that served its session's last turn, credited as cached blocks, unless the session was idle longer than this (0: sessions off)")
		maxQWait   = fs.Duration("max-queue-wait", 2*time.Second, "shed (429) requests whose predicted wait for a free worker, from the queue's measured drain rate, nears this: from half of it on, with a probability rising to 1 at it (0: off, only --queue-depth bounds the queue)")
		tokenizer  = fs.String("tokenizer", "bytes", "tokenizer for text prompts and chat: bytes (one token per UTF-8 byte, the simulated fleet's default) or the path of the engines' Hugging Face tokenizer.json or of its directory (with tokenizer_config.json)")
		eagle      = fs.Bool("eagle-windows", false, "hash requests and the ZMQ events' EAGLE (bigram) pages as Dynamo does for SGLang EAGLE workers: a block with the token after it, so a page matches only when that token does too (the whole fleet; see EAGLE pages)")
		forwardIDs = fs.Bool("forward-token-ids", false, "send a /v1/completions text prompt to the worker as the token ids the router hashed (vLLM and SGLang accept them), so router and engine cannot tokenize differently")
		shards     = fs.Int("shards", 1, "index shards")
		cpus       = fs.String("cpus", "", "pin index shards to these CPUs, e.g. 0-3,8 (empty: no pinning)")
		maxBody    = fs.Int("max-body-bytes", 16<<20, "largest request body accepted (413 beyond)")
		maxHeader  = fs.Int("max-header-bytes", router.DefaultMaxHeaderBytes, "largest request line and headers accepted (431 beyond); also the per-connection read buffer")
		readTO     = fs.Duration("http-read-timeout", 10*time.Second, "time to read a request, its body included (streamed answers are not bounded by it)")
		maxConns   = fs.Int("max-conns", router.DefaultMaxConns, "open API connections at most; beyond, 503 and close")
		inflight   = byteSize(router.DefaultMaxInflightBodyBytes)
		maxWorkers = fs.Int("max-workers", router.DefaultMaxWorkers, "registered workers at most; further registrations are refused and counted")
		maxRanks   = fs.Int("max-dp-ranks", plane.DefaultMaxDpRanks, "dp ranks per registration at most; larger registrations are refused and counted")
		maxPrompt  = fs.Int("max-prompt-tokens", 0, "longer prompts get 400 (0: the largest max_model_len the workers register, else 1048576; always at most the largest worker's KV capacity)")
		peers      = fs.String("router-peers", "", "comma-separated --router-id of the replicas whose all-workers-busy messages are honoured (*: any; empty: none)")
		maxEvent   = byteSize(zmq.DefaultMaxMessageBytes)
		unkGrace   = fs.Duration("unknown-worker-grace", node.DefaultUnknownGrace, "KV events of a worker that has not registered are applied this long, then its blocks removed and its events dropped until it registers")
		capFactor  = fs.Int("index-cap-factor", node.DefaultCapFactor, "a registered worker's index entries per dp rank are capped at this × its kv_blocks")
		natsAuth   = fs.Bool("nats-auth", false, "the embedded nats-server requires users: the router's, and the workers' (written to --nats-auth-file), with subject permissions (docs/operations.md: Limits and trust)")
		authFile   = fs.String("nats-auth-file", "", "with --nats-auth: file the workers' NATS URL with credentials is written to, mode 0600 (default: <data-dir>/nats-worker.url)")
		grace      = fs.Duration("shutdown-grace", 10*time.Second, "on SIGINT/SIGTERM, time in-flight requests get to finish")
		readyDelay = autoDuration{}
		fbTimeout  = fs.Duration("worker-first-byte-timeout", 10*time.Second, "a streamed request whose worker sends no byte within this is retried on another worker and the worker ejected (0: off)")
		respTO     = fs.Duration("worker-response-timeout", 60*time.Second, "a non-streamed request whose worker has not answered within this (or within the client's own X-Stainless-Timeout, if shorter) is retried on another worker and the worker ejected (0: off)")
		ejectAfter = fs.Int("worker-eject-failures", 1, "consecutive connection failures (refused, timed out, dropped) after which a worker is taken out of routing")
		probeIvl   = fs.Duration("worker-probe-interval", time.Second, "first wait before a down worker's GET /health is asked; doubles after each failure")
		probeMax   = fs.Duration("worker-probe-max-interval", 30*time.Second, "longest wait between health probes of a down worker")
		pprofOn    = fs.Bool("pprof", false, "start the admin listener on --admin-addr: /debug/pprof/*, /metrics, /debug/decisions and /tenants")
		adminAddr  = fs.String("admin-addr", "127.0.0.1:6060", "admin listener (with --pprof)")
		routerID   = fs.String("router-id", "", "this replica's name in all-workers-busy and replica-sync messages; unique per replica (default: kvroute-<pid>-<random>)")
		syncOn     = fs.Bool("router-replica-sync", false, "share active load with the other router replicas: publish this router's bookings on NATS and book theirs (docs/operations.md: More than one router process)")
		syncIvl    = fs.Duration("router-sync-interval", router.DefaultSyncInterval, "with --router-replica-sync: at most one message of bookings per interval (an idle replica publishes a booking at once; the ones made meanwhile are batched)")
		syncExp    = fs.Duration("router-sync-expiry", router.DefaultSyncExpiry, "with --router-replica-sync: a replica silent this long has its bookings dropped (heartbeats go out every expiry/4)")
		staticKV   = fs.Int("worker-kv-blocks", 0, "KV blocks per rank of --worker engines, for busy detection (0: unknown)")
		staticMBT  = fs.Int("worker-max-batched-tokens", 0, "max batched tokens of --worker engines, for --busy-prefill-frac (0: unknown)")
		serveIdx   = fs.Bool("serve-indexer", false, "answer index queries from routers started with --use-remote-indexer (NATS request/reply)")
		useRemote  = fs.Bool("use-remote-indexer", false, "keep no index (no KV-event ingest): look prompts up in the serving indexers (serve --serve-indexer, kvroute indexer) over NATS")
		remoteTO   = fs.Duration("remote-indexer-timeout", node.DefaultRemoteTimeout, "with --use-remote-indexer: a lookup not answered within this routes its batch with zero overlap (counted, never an error to the client)")
		workers    stringList
		zmqWorkers stringList
		chatTmpl   = fs.String("chat-template", "", "chat template for /v1/chat/completions: a tokenizer_config.json, a directory holding one, or a Jinja file (default: the chat_template beside --tokenizer PATH; none: ChatML)")
		modelTmpls stringList
		modelToks  stringList
		o          serveOptions
	)
	fs.Var(&inflight, "max-inflight-body-bytes", "request bodies being read or handled at once, by declared length (bytes, or with KiB, MiB, GiB); beyond, 503 before the body is read")
	fs.Var(&maxEvent, "max-event-bytes", "largest ZMQ KV-event frame or message (bytes, or with KiB, MiB); a larger one closes the connection")
	fs.Var(&evMaxBytes, "events-max-bytes", "JetStream: size bound of the KV-event stream, oldest dropped first (bytes, or with KiB, MiB, GiB, TiB)")
	fs.Var(&readyDelay, "shutdown-ready-delay", "first part of --shutdown-grace during which /ready answers 503 while requests are still served (auto: min(5s, grace/2); 0: none)")
	fs.Var(&workers, "worker", "a static worker ID=http://host:port[,ranks=0-3][,model=NAME][,role=prefill|decode|both][,pd_protocol=vllm-nixl|sglang][,bootstrap_port=N] that does not register (repeatable); without model= the router asks GET /v1/models")
	fs.Var(&modelTmpls, "model-chat-template", "MODEL=PATH: the chat template of one model's requests, PATH as --chat-template (repeatable)")
	fs.Var(&modelToks, "model-tokenizer", "MODEL=PATH: tokenize requests for MODEL with the Hugging Face tokenizer at PATH (file or directory) instead of --tokenizer (repeatable, or comma separated)")
	fs.Var(&zmqWorkers, "zmq-worker", "subscribe to a vLLM/SGLang engine's ZMQ KV events: ID[:DP]=tcp://host:port[,model=NAME][,replay=tcp://host:port][,role=prefill|decode|both, the role of --worker ID] (repeatable)")
	fs.IntVar(&o.demoFleet, "demo-fleet", 0, "also run this many simulated workers in the process (evaluation without GPUs)")
	fs.StringVar(&o.demoTransport, "demo-transport", plane.TransportDynamo, "KV events of the demo fleet: dynamo, native or zmq")
	fs.Float64Var(&o.demoSpeedup, "demo-speedup", 1, "divide the demo fleet's step times by this factor")
	fs.IntVar(&o.demoKVBlocks, "demo-kv-blocks", 16384, "KV blocks per demo worker")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	sf := addSchedFlags(fs)
	pdf := addPDFlags(fs)
	vf := addVerifyFlags(fs)
	for _, e := range ext {
		e.add(fs)
	}
	var cfg router.ServiceConfig
	if err := parseFlags(fs, args); err != nil {
		return cfg, o, err
	}
	for _, e := range ext {
		if err := e.check(fs, args); err != nil {
			return cfg, o, err
		}
	}
	o.namespace, o.component = *ns, *comp
	if fs.NArg() > 0 {
		return cfg, o, fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}

	sc := sched.DefaultConfig()
	sc.BlockSize = *blockSize
	var err error
	if sc.Policy, err = sched.ParsePolicy(*mode); err != nil {
		return cfg, o, fmt.Errorf("--router-mode: %w", err)
	}
	for name, v := range map[string]int{"block-size": *blockSize, "shards": *shards, "max-body-bytes": *maxBody, "approx-max-blocks": *approxMax} {
		if v <= 0 {
			return cfg, o, fmt.Errorf("--%s must be > 0 (got %d)", name, v)
		}
	}
	if err := sf.apply(&sc); err != nil {
		return cfg, o, err
	}
	if *maxQWait < 0 {
		return cfg, o, fmt.Errorf("--max-queue-wait must be >= 0 (got %v)", *maxQWait)
	}
	sc.MaxQueueWait = *maxQWait
	if *sessTTL < 0 {
		return cfg, o, fmt.Errorf("--session-ttl must be >= 0 (got %v)", *sessTTL)
	}
	sc.SessionTTL = *sessTTL
	if !(o.demoSpeedup > 0) {
		return cfg, o, fmt.Errorf("--demo-speedup must be > 0 (got %g)", o.demoSpeedup)
	}
	if *maxHeader < 1024 || *maxHeader > 1<<20 {
		return cfg, o, fmt.Errorf("--max-header-bytes must be in [1024, 1048576] (got %d)", *maxHeader)
	}
	if *qTimeout <= 0 || *readTO <= 0 || *grace <= 0 || *approxTTL <= 0 {
		return cfg, o, errors.New("--queue-timeout, --http-read-timeout, --shutdown-grace and --approx-ttl must be > 0")
	}
	if *fbTimeout < 0 {
		return cfg, o, fmt.Errorf("--worker-first-byte-timeout must be >= 0 (got %v)", *fbTimeout)
	}
	if *respTO < 0 {
		return cfg, o, fmt.Errorf("--worker-response-timeout must be >= 0 (got %v)", *respTO)
	}
	if *ejectAfter < 1 {
		return cfg, o, fmt.Errorf("--worker-eject-failures must be >= 1 (got %d)", *ejectAfter)
	}
	if *probeIvl <= 0 || *probeMax <= 0 {
		return cfg, o, errors.New("--worker-probe-interval and --worker-probe-max-interval must be > 0")
	}
	if *probeMax < *probeIvl {
		return cfg, o, fmt.Errorf("--worker-probe-max-interval %v is shorter than --worker-probe-interval %v", *probeMax, *probeIvl)
	}
	var shutdownReady time.Duration // 0: auto
	if readyDelay.set {
		switch d := readyDelay.d; {
		case d < 0:
			return cfg, o, fmt.Errorf("--shutdown-ready-delay must be >= 0 (got %v)", d)
		case d == 0:
			shutdownReady = -1 // none
		case d >= *grace:
			return cfg, o, fmt.Errorf("--shutdown-ready-delay %v must be shorter than --shutdown-grace %v (in-flight requests need the rest)", d, *grace)
		default:
			shutdownReady = d
		}
	}
	if sc.BusyPrefillFrac > 0 && *staticMBT == 0 && len(workers) > 0 {
		fmt.Fprintln(os.Stderr, "kvroute serve: warning: --busy-prefill-frac cannot apply to --worker engines without --worker-max-batched-tokens")
	}
	subjects, err := plane.SubjectsFor(*ns, *comp)
	if err != nil {
		return cfg, o, fmt.Errorf("--namespace/--component: %w", err)
	}
	tok, err := prompt.NewTokenizer(*tokenizer)
	if err != nil {
		return cfg, o, fmt.Errorf("--tokenizer: %w", err)
	}
	chatDefault, chatByModel, err := chatTemplates(*tokenizer, *chatTmpl, modelTmpls, func(msg string) {
		fmt.Fprintln(os.Stderr, "kvroute serve: warning:", msg)
	})
	if err != nil {
		return cfg, o, err
	}
	modelTok, err := parseModelTokenizers(modelToks, *tokenizer, tok)
	if err != nil {
		return cfg, o, err
	}
	o.tokenizerFrom, o.chatFrom = loadedFrom(*tokenizer, *chatTmpl, chatDefault != nil, modelToks, modelTmpls)

	// NATS: external or embedded, not both.
	if *natsURL != "" && (*dataDir != "" || *natsPort != 0) {
		return cfg, o, errors.New("--data-dir and --nats-port configure the embedded NATS server; they cannot be used with --nats")
	}
	if *natsURL == "" && (*natsCreds != "" || *natsCA != "" || *natsCert != "" || *natsKey != "") {
		return cfg, o, errors.New("--nats-creds and --nats-tls-* need --nats (the embedded server needs no credentials)")
	}
	if (*natsCert == "") != (*natsKey == "") {
		return cfg, o, errors.New("--nats-tls-cert and --nats-tls-key go together")
	}
	if *maxConns < 1 || *maxWorkers < 1 || *maxRanks < 1 || *maxRanks > wire.MaxDPRank+1 {
		return cfg, o, fmt.Errorf("--max-conns, --max-workers and --max-dp-ranks must be >= 1, --max-dp-ranks at most %d (got %d, %d, %d)", wire.MaxDPRank+1, *maxConns, *maxWorkers, *maxRanks)
	}
	if *maxPrompt < 0 {
		return cfg, o, fmt.Errorf("--max-prompt-tokens must be >= 0 (got %d)", *maxPrompt)
	}
	if inflight < byteSize(*maxBody) {
		return cfg, o, fmt.Errorf("--max-inflight-body-bytes %d must be at least --max-body-bytes %d", inflight, *maxBody)
	}
	if maxEvent < 1024 {
		return cfg, o, fmt.Errorf("--max-event-bytes must be at least 1024 (got %d)", maxEvent)
	}
	if *unkGrace <= 0 {
		return cfg, o, fmt.Errorf("--unknown-worker-grace must be > 0 (got %v)", *unkGrace)
	}
	if *capFactor < 1 {
		return cfg, o, fmt.Errorf("--index-cap-factor must be >= 1 (got %d)", *capFactor)
	}
	if *natsAuth && *natsURL != "" {
		return cfg, o, errors.New("--nats-auth configures the embedded nats-server; with --nats, configure users on your server (docs/operations.md: Limits and trust)")
	}
	if *authFile != "" && !*natsAuth {
		return cfg, o, errors.New("--nats-auth-file needs --nats-auth")
	}
	if *natsAuth && *authFile == "" {
		if *dataDir == "" {
			return cfg, o, errors.New("--nats-auth needs --nats-auth-file (or --data-dir, to write <data-dir>/nats-worker.url)")
		}
		*authFile = filepath.Join(*dataDir, "nats-worker.url")
	}
	var peerIDs []string
	if *peers != "" {
		peerIDs = strings.Split(*peers, ",")
		for i, p := range peerIDs {
			if peerIDs[i] = strings.TrimSpace(p); peerIDs[i] == "" {
				return cfg, o, fmt.Errorf("--router-peers %q: empty router id", *peers)
			}
		}
	}
	if *natsPort < 0 || *natsPort > 65535 {
		return cfg, o, fmt.Errorf("--nats-port %d out of range", *natsPort)
	}
	if *evMaxAge <= 0 {
		return cfg, o, fmt.Errorf("--events-max-age must be > 0 (got %v)", *evMaxAge)
	}
	if evMaxBytes <= 0 {
		return cfg, o, fmt.Errorf("--events-max-bytes must be > 0 (got %d)", evMaxBytes)
	}
	if *evReplicas < 1 || *evReplicas > 5 {
		return cfg, o, fmt.Errorf("--events-replicas must be in [1, 5] (got %d)", *evReplicas)
	}
	if *jsWait <= 0 {
		return cfg, o, fmt.Errorf("--jetstream-wait must be > 0 (got %v)", *jsWait)
	}
	if *snapBucket != "" && !*evJS {
		return cfg, o, errors.New("--snapshot-bucket needs --events-jetstream (the snapshot is resumed from the KV-event stream)")
	}
	if *snapBucket != "" && *noEvents {
		return cfg, o, errors.New("--snapshot-bucket snapshots the KV-event index; it cannot be used with --no-kv-events")
	}
	if *snapIvl <= 0 {
		return cfg, o, fmt.Errorf("--snapshot-interval must be > 0 (got %v)", *snapIvl)
	}
	if *snapEvents == 0 {
		return cfg, o, errors.New("--snapshot-events must be > 0")
	}
	var snapErr error
	fs.Visit(func(f *flag.Flag) {
		if (f.Name == "snapshot-interval" || f.Name == "snapshot-events") && *snapBucket == "" {
			snapErr = fmt.Errorf("--%s needs --snapshot-bucket (and --events-jetstream)", f.Name)
		}
	})
	if snapErr != nil {
		return cfg, o, snapErr
	}
	if *evReplicas > 1 && *natsURL == "" {
		return cfg, o, fmt.Errorf("--events-replicas %d needs a NATS cluster (--nats); the embedded server is a single node", *evReplicas)
	}

	if *serveIdx && *useRemote {
		return cfg, o, errors.New("--serve-indexer and --use-remote-indexer are mutually exclusive: a router either serves its index or keeps none and queries a serving one")
	}
	if *remoteTO <= 0 {
		return cfg, o, fmt.Errorf("--remote-indexer-timeout must be > 0 (got %v)", *remoteTO)
	}
	var remoteErr error
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "remote-indexer-timeout" && !*useRemote {
			remoteErr = errors.New("--remote-indexer-timeout needs --use-remote-indexer")
		}
	})
	if remoteErr != nil {
		return cfg, o, remoteErr
	}
	if *syncIvl <= 0 {
		return cfg, o, fmt.Errorf("--router-sync-interval must be > 0 (got %v)", *syncIvl)
	}
	if *syncExp <= 0 {
		return cfg, o, fmt.Errorf("--router-sync-expiry must be > 0 (got %v)", *syncExp)
	}
	var syncErr error
	fs.Visit(func(f *flag.Flag) {
		if (f.Name == "router-sync-interval" || f.Name == "router-sync-expiry") && !*syncOn {
			syncErr = fmt.Errorf("--%s needs --router-replica-sync", f.Name)
		}
	})
	if syncErr != nil {
		return cfg, o, syncErr
	}
	if *useRemote && (len(zmqWorkers) > 0 || *evJS) {
		return cfg, o, errors.New("--use-remote-indexer keeps no index: --zmq-worker and --events-jetstream belong to the serving indexer")
	}

	rc := router.Config{TenantsPath: *tenantsF, Sched: sc, Seed: *sf.seed, Approx: *noEvents, Tokenizer: tok, ModelTokenizers: modelTok,
		ForwardTokenIDs: *forwardIDs, EagleWindows: *eagle, Subjects: subjects, ID: *routerID,
		QueueTimeout: *qTimeout, MaxBodyBytes: *maxBody, MaxHeaderBytes: *maxHeader, ReadTimeout: *readTO,
		MaxConns: *maxConns, MaxInflightBodyBytes: int64(inflight), MaxWorkers: *maxWorkers, MaxDpRanks: *maxRanks,
		MaxPromptTokens: *maxPrompt, Peers: peerIDs, Sync: *syncOn, SyncInterval: *syncIvl, SyncExpiry: *syncExp,
		Proxy:      proxy.Config{FirstByteTimeout: *fbTimeout, ResponseTimeout: *respTO},
		EjectAfter: *ejectAfter, ProbeInterval: *probeIvl, ProbeMaxInterval: *probeMax,
		ChatTemplate: chatDefault, ModelChatTemplates: chatByModel}
	if err := vf.apply(&rc); err != nil {
		return cfg, o, err
	}
	for _, w := range workers {
		sw, err := parseStaticWorker(w)
		if err != nil {
			return cfg, o, err
		}
		sw.Capacity = sched.Capacity{TotalBlocks: uint64(max(*staticKV, 0)), MaxBatchedTokens: uint64(max(*staticMBT, 0)), Role: sw.Capacity.Role}
		rc.Workers = append(rc.Workers, sw)
	}
	var zs []ingest.ZMQWorker
	zmqRoles := map[uint64]sched.Role{}
	for _, z := range zmqWorkers {
		z, role, set, err := zmqWorkerRole(z)
		if err != nil {
			return cfg, o, err
		}
		zw, err := ingest.ParseZMQWorker(z)
		if err != nil {
			return cfg, o, err
		}
		if set {
			zmqRoles[zw.Worker] = role
		}
		zs = append(zs, zw)
	}
	if err := applyZMQRoles(rc.Workers, zmqRoles); err != nil {
		return cfg, o, err
	}
	if err := pdf.apply(&rc.Sched, &rc, &o); err != nil {
		return cfg, o, err
	}
	if *noEvents && len(zs) > 0 {
		return cfg, o, errors.New("--zmq-worker subscribes to KV events; it cannot be used with --no-kv-events")
	}
	if o.demoFleet < 0 {
		return cfg, o, fmt.Errorf("--demo-fleet must be >= 0 (got %d)", o.demoFleet)
	}
	switch o.demoTransport {
	case plane.TransportDynamo, plane.TransportNative, plane.TransportZMQ:
	default:
		return cfg, o, fmt.Errorf("--demo-transport must be dynamo, native or zmq (got %q)", o.demoTransport)
	}
	ic := shard.Config{Shards: *shards}
	if *cpus != "" {
		if ic.CPUs, err = cpuset.Parse(*cpus); err != nil {
			return cfg, o, fmt.Errorf("--cpus: %w", err)
		}
	}
	if *noEvents {
		ic.Core.Approx = shard.ApproxConfig{TTL: *approxTTL, MaxBlocks: *approxMax}
	}
	if err := rc.Validate(); err != nil {
		return cfg, o, err
	}
	cfg = router.ServiceConfig{
		ServeIndexer: *serveIdx, UseRemoteIndexer: *useRemote, RemoteIndexerTimeout: *remoteTO,
		Router: rc, HTTPAddr: *httpAddr, AdminAddr: *adminAddr, Pprof: *pprofOn, ShutdownGrace: *grace, ShutdownReadyDelay: shutdownReady,
		Node: node.Config{Index: ic, NATSURL: *natsURL, NATSCreds: *natsCreds, NATSCA: *natsCA, NATSCert: *natsCert,
			NATSKey: *natsKey, DataDir: *dataDir, NATSPort: *natsPort, ZMQWorkers: zs, JetStream: *evJS, LiveEvents: *evLive,
			NATSAuth: *natsAuth, NATSAuthFile: *authFile, MaxEventBytes: int(maxEvent), JetStreamWait: *jsWait,
			Fleet:    node.FleetConfig{Grace: *unkGrace, CapFactor: *capFactor},
			Stream:   ingest.StreamConfig{MaxAge: *evMaxAge, MaxBytes: int64(evMaxBytes), Replicas: *evReplicas},
			Snapshot: node.SnapshotConfig{Bucket: *snapBucket, Interval: *snapIvl, Events: *snapEvents}},
	}
	return cfg, o, nil
}

// loadedFrom describes the tokenizer and the chat template serve loaded and
// where from: --tokenizer (bytes, or the tokenizer.json file), and
// --chat-template, the tokenizer_config.json beside --tokenizer (hasDefault:
// it held a chat_template), or the built-in ChatML; per-model ones follow.
func loadedFrom(tokenizer, chatTemplate string, hasDefault bool, modelToks, modelTmpls []string) (tok, chat string) {
	tok = "bytes (one token per UTF-8 byte)"
	if tokenizer != "bytes" && tokenizer != "" {
		file := tokenizer
		if st, err := os.Stat(tokenizer); err == nil && st.IsDir() {
			file = filepath.Join(tokenizer, "tokenizer.json")
		}
		if abs, err := filepath.Abs(file); err == nil {
			file = abs
		}
		tok = "Hugging Face tokenizer.json " + file + " (--tokenizer)"
	}
	switch {
	case chatTemplate != "":
		chat = chatTemplate + " (--chat-template)"
	case hasDefault:
		dir := tokenizer
		if st, err := os.Stat(tokenizer); err == nil && !st.IsDir() {
			dir = filepath.Dir(tokenizer)
		}
		chat = filepath.Join(dir, "tokenizer_config.json") + " (beside --tokenizer)"
	default:
		chat = "ChatML (built in)"
	}
	if len(modelToks) > 0 {
		tok += "; per model: " + strings.Join(modelToks, ", ") + " (--model-tokenizer)"
	}
	if len(modelTmpls) > 0 {
		chat += "; per model: " + strings.Join(modelTmpls, ", ") + " (--model-chat-template)"
	}
	return tok, chat
}

// logLoaded logs which tokenizer and chat template serve uses.
func logLoaded(log *slog.Logger, o serveOptions) {
	log.Info("tokenizer loaded", "tokenizer", o.tokenizerFrom)
	log.Info("chat template loaded", "chat_template", o.chatFrom)
}

// parseModelTokenizers loads each --model-tokenizer MODEL=PATH (values may
// also be comma separated); nil when none is given. A path is loaded once
// (def is --tokenizer's, loaded from defPath).
func parseModelTokenizers(vals []string, defPath string, def openai.Tokenizer) (map[string]openai.Tokenizer, error) {
	var out map[string]openai.Tokenizer
	byPath := map[string]openai.Tokenizer{defPath: def}
	for _, v := range vals {
		for _, item := range strings.Split(v, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			model, path, ok := strings.Cut(item, "=")
			if !ok || model == "" || path == "" {
				return nil, fmt.Errorf("--model-tokenizer %q: want MODEL=PATH", item)
			}
			if _, dup := out[model]; dup {
				return nil, fmt.Errorf("--model-tokenizer: model %q given twice", model)
			}
			tok, ok := byPath[path]
			if !ok {
				var err error
				if tok, err = prompt.NewTokenizer(path); err != nil {
					return nil, fmt.Errorf("--model-tokenizer %s: %w", model, err)
				}
				byPath[path] = tok
			}
			if out == nil {
				out = map[string]openai.Tokenizer{}
			}
			out[model] = tok
		}
	}
	return out, nil
}

// parseStaticWorker parses --worker ID=http://host:port[,ranks=0-3][,model=NAME].
func parseStaticWorker(s string) (router.StaticWorker, error) {
	var w router.StaticWorker
	idStr, rest, ok := strings.Cut(s, "=")
	if !ok {
		return w, fmt.Errorf("--worker %q: want ID=http://host:port", s)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(idStr), 10, 64)
	if err != nil {
		return w, fmt.Errorf("--worker %q: %q is not a worker id", s, idStr)
	}
	w.ID = id
	parts := strings.Split(rest, ",")
	w.URL = strings.TrimRight(parts[0], "/")
	if !strings.HasPrefix(w.URL, "http://") && !strings.HasPrefix(w.URL, "https://") {
		return w, fmt.Errorf("--worker %q: the URL must start with http:// or https://", s)
	}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		if ok, err := staticWorkerPD(&w, s, k, v); ok {
			if err != nil {
				return w, err
			}
			continue
		}
		if k == "model" {
			if v == "" {
				return w, fmt.Errorf("--worker %q: model= needs a model name", s)
			}
			w.Model = v
			continue
		}
		if k != "ranks" {
			return w, fmt.Errorf("--worker %q: unknown option %q (supported: ranks=0-3, model=NAME, role=, pd_protocol=, bootstrap_port=)", s, k)
		}
		list, err := cpuset.Parse(v)
		if err != nil {
			return w, fmt.Errorf("--worker %q: ranks: %v", s, err)
		}
		for _, r := range list {
			w.DpRanks = append(w.DpRanks, uint32(r))
		}
	}
	return w, nil
}

func runServe(args []string) error {
	cfg, o, err := serveConfig(args)
	if err != nil {
		return err
	}
	stop, stopSignals := shutdownSignals("kvroute serve")
	defer stopSignals()
	return serve(cfg, o, stop, nil)
}

// serve runs the router (and the demo fleet) until stop is closed; ready,
// if set, is called with the API address once it serves.
func serve(cfg router.ServiceConfig, o serveOptions, stop <-chan struct{}, ready func(addr string)) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %v", err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	logLoaded(cfg.Logger, o)
	cfg.Node.Abort = stop // a signal while waiting for JetStream ends the wait
	svc, err := router.StartService(cfg)
	if err != nil {
		return err
	}
	detach := func() {}
	if o.attach != nil {
		if detach, err = o.attach(svc, cfg.Logger); err != nil {
			return errors.Join(err, svc.Close())
		}
	}
	var fleet *mock.Fleet
	var pdFleets []*mock.Fleet
	transport := o.demoTransport
	if cfg.Router.Approx {
		transport = plane.TransportNone
	}
	if o.demoFleet > 0 {
		nc, err := demoNATS(svc, "demo-fleet")
		if err != nil {
			detach()
			_ = svc.Close()
			return err
		}
		if nc != svc.NC {
			defer nc.Close()
		}
		fleet, err = mock.Start(mock.Config{
			Workers: o.demoFleet, Port: 0, BlockSize: cfg.Router.Sched.BlockSize, KVBlocks: o.demoKVBlocks,
			Speedup: o.demoSpeedup, Transport: transport, ZMQPort: 0,
			Namespace: o.namespace, Component: o.component, Logger: cfg.Logger,
			ChatTemplate: cfg.Router.ChatTemplate, // the fleet renders chats as the router does
			// The demo fleet serves model "mock" and tokenizes as the router does for it.
			Tokenizer: openai.TokenizerFor(&openai.ModelTokenizers{Default: cfg.Router.Tokenizer, ByModel: cfg.Router.ModelTokenizers}, []byte("mock")),
		}, nc)
		if err != nil {
			detach()
			_ = svc.Close()
			return fmt.Errorf("--demo-fleet: %w", err)
		}
		for _, w := range fleet.Workers() {
			fmt.Printf("demo worker %d %s\n", w.ID(), w.URL())
		}
	}
	if o.demoPrefill > 0 {
		nc, err := demoNATS(svc, "demo-fleet-pd")
		if err != nil {
			detach()
			_ = svc.Close()
			return err
		}
		if nc != svc.NC {
			defer nc.Close()
		}
		if pdFleets, err = startDemoPD(cfg, o, nc, transport); err != nil {
			detach()
			_ = svc.Close()
			return err
		}
	}
	fmt.Printf("kvroute serving on http://%s (NATS %s)\n", svc.Addr(), svc.NATSURL)
	if cfg.Node.NATSAuthFile != "" {
		fmt.Printf("workers connect to NATS with the URL in %s (kvroute mock --nats \"$(cat %s)\")\n", cfg.Node.NATSAuthFile, cfg.Node.NATSAuthFile)
	}
	if a := svc.AdminAddr(); a != "" {
		fmt.Printf("admin (pprof, metrics) on http://%s\n", a)
	}
	if ready != nil {
		ready(svc.Addr())
	}
	<-stop
	fmt.Println("shutting down")
	detach()
	// Stop taking requests and let in-flight ones finish first, then stop
	// the demo fleet while NATS still carries its leave messages.
	err = svc.Drain()
	if fleet != nil {
		err = errors.Join(err, fleet.Close())
	}
	for _, f := range pdFleets {
		err = errors.Join(err, f.Close())
	}
	return errors.Join(err, svc.Close())
}

// demoNATS is the NATS connection a demo fleet started by --flag uses: the
// service's own, or with --nats-auth a connection of its own as a worker
// (the caller closes it).
func demoNATS(svc *router.Service, flag string) (*nats.Conn, error) {
	if svc.WorkerURL == "" {
		return svc.NC, nil
	}
	nc, err := nats.Connect(svc.WorkerURL, nats.Name("kvroute-"+flag))
	if err != nil {
		return nil, fmt.Errorf("--%s: NATS: %w", flag, err)
	}
	return nc, nil
}
