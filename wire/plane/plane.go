package plane

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/kvroute/kvroute/wire"
)

// Subjects are the NATS subjects of one namespace and component.
type Subjects struct {
	KVEvents, KVEventsNative, Load, Heartbeat, Leave, AllBusy string
	// KVEventsLegacy is the subject older Dynamo (before its msgpack event
	// plane) published JSON RouterEvents on: ...kv_events.
	KVEventsLegacy string
	// Recover is the prefix of the workers' recovery subjects (see
	// RecoverSubject).
	Recover string
}

// SubjectsFor returns the subjects of namespace ns and component comp. Both
// must be non-empty NATS tokens (no dots, spaces or wildcards).
func SubjectsFor(ns, comp string) (Subjects, error) {
	for name, v := range map[string]string{"namespace": ns, "component": comp} {
		if v == "" || strings.ContainsAny(v, ". \t*>") {
			return Subjects{}, fmt.Errorf("%s %q must be a non-empty NATS token (no dots, spaces or wildcards)", name, v)
		}
	}
	base := "namespace." + ns + ".component." + comp + "."
	return Subjects{
		KVEvents:       base + "kv-events",
		KVEventsNative: base + "kv-events.native",
		KVEventsLegacy: base + "kv_events",
		Load:           base + "load-metrics",
		Heartbeat:      base + "workers.heartbeat",
		Leave:          base + "workers.leave",
		AllBusy:        base + "all-workers-busy",
		Recover:        base + "kv-recover",
	}, nil
}

// Event transports a worker can publish KV events on.
const (
	TransportDynamo = "dynamo" // Dynamo msgpack over NATS
	TransportNative = "native" // kvroute native over NATS
	TransportZMQ    = "zmq"    // vLLM ZMQ PUB, with replay
	TransportNone   = "none"   // no events (approximate mode)
)

// Registration announces a worker: sent at start and as its heartbeat.
type Registration struct {
	WorkerID uint64 `json:"worker_id"`
	// Instance names one run of the worker process (a random string drawn
	// at start; a restart draws a new one). A registry recognises a restart
	// by it, and a withdrawal must name the live instance. Optional for
	// compatibility: without it a worker is recognised by its URL only.
	Instance         string   `json:"instance_id,omitempty"`
	URL              string   `json:"url"`
	Model            string   `json:"model,omitempty"`
	DpRanks          []uint32 `json:"dp_ranks"`
	BlockSize        int      `json:"block_size"`
	KVBlocks         int      `json:"kv_blocks"` // per dp rank
	MaxBatchedTokens int      `json:"max_batched_tokens,omitempty"`
	// MaxModelLen is the longest prompt plus output, in tokens, the worker
	// accepts (vLLM's max_model_len); 0: not declared.
	MaxModelLen     int    `json:"max_model_len,omitempty"`
	EventTransport  string `json:"event_transport"`
	ZMQEndpoint     string `json:"zmq_endpoint,omitempty"` // with TransportZMQ: rank r publishes on this port + r
	ZMQReplay       string `json:"zmq_replay,omitempty"`
	HeartbeatMillis int    `json:"heartbeat_ms"`

	// Disaggregated prefill/decode. All three are optional: a registration
	// without them is an aggregated worker, as before they existed.

	// Role is RolePrefill, RoleDecode or RoleBoth; "" means RoleBoth.
	Role string `json:"role,omitempty"`
	// PDProtocol is how the worker takes part in a disaggregated request:
	// ProtocolVLLMNIXL or ProtocolSGLang; "" means ProtocolVLLMNIXL.
	PDProtocol string `json:"pd_protocol,omitempty"`
	// BootstrapPort is an SGLang worker's disaggregation bootstrap port
	// (--disaggregation-bootstrap-port), sent as bootstrap_port to both
	// legs of a request it prefills; 0: not declared. Only with
	// ProtocolSGLang. It is optional even for a prefill worker, as in
	// SGLang's mini_lb (--prefill-bootstrap-ports may be left out): the
	// legs then carry bootstrap_port null and the engine falls back to
	// its own setting (SGLangDefaultBootstrapPort unless changed).
	BootstrapPort int `json:"bootstrap_port,omitempty"`
}

// Worker roles in disaggregated prefill/decode serving.
const (
	RoleBoth    = "both"    // aggregated: prefill and decode (the default)
	RolePrefill = "prefill" // computes prompts' KV caches for decode workers
	RoleDecode  = "decode"  // pulls a prompt's KV cache and generates
)

// Disaggregation protocols (how the two legs of a request are sent).
const (
	// ProtocolVLLMNIXL is vLLM's NIXL connector: a one-token prefill leg
	// whose answer's kv_transfer_params go into the decode leg (the
	// default).
	ProtocolVLLMNIXL = "vllm-nixl"
	// ProtocolSGLang is SGLang's PD protocol: both legs at once, meeting
	// on bootstrap_host, bootstrap_port and bootstrap_room.
	ProtocolSGLang = "sglang"
)

// SGLangDefaultBootstrapPort is SGLang's default
// --disaggregation-bootstrap-port.
const SGLangDefaultBootstrapPort = 8998

// RoleOrDefault is the worker's role, RoleBoth when none is declared.
func (r *Registration) RoleOrDefault() string {
	if r.Role == "" {
		return RoleBoth
	}
	return r.Role
}

// ProtocolOrDefault is the worker's disaggregation protocol,
// ProtocolVLLMNIXL when none is declared.
func (r *Registration) ProtocolOrDefault() string {
	if r.PDProtocol == "" {
		return ProtocolVLLMNIXL
	}
	return r.PDProtocol
}

// Bounds of a valid registration (Validate). The strings are bounded so
// that one registration cannot make /workers or the logs large.
const (
	DefaultMaxDpRanks  = 256     // ranks per registration (--max-dp-ranks)
	MaxURLBytes        = 2048    // url, zmq_endpoint, zmq_replay
	MaxNameBytes       = 256     // model, instance_id
	MaxBlockSize       = 1 << 16 // tokens per block
	MaxHeartbeatMillis = 600_000 // 10 min: a worker that never expires is never forgotten
)

// Validate checks a registration's fields with DefaultMaxDpRanks.
func (r *Registration) Validate() error { return r.ValidateRanks(DefaultMaxDpRanks) }

// ValidateRanks checks a registration's fields: a worker id > 0, an http or
// https URL with a host, 1 to maxRanks distinct dp ranks each at most
// wire.MaxDPRank, a block size in [1, MaxBlockSize], non-negative
// capacities, a heartbeat in [1, MaxHeartbeatMillis] ms, a known event
// transport (zmq with a tcp://host:port endpoint), bounded strings, and, when
// declared, a known role and pd_protocol and a bootstrap_port in [1, 65535]
// with the sglang protocol only.
func (r *Registration) ValidateRanks(maxRanks int) error {
	if r.WorkerID == 0 {
		return errors.New("registration: worker_id must be > 0")
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("registration of worker %d: "+format, append([]any{r.WorkerID}, args...)...)
	}
	if len(r.URL) > MaxURLBytes {
		return bad("url longer than %d bytes", MaxURLBytes)
	}
	u, err := url.Parse(r.URL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https"):
		return bad("url %q must be http:// or https://", r.URL)
	case u.Host == "" || u.Hostname() == "":
		return bad("url %q has no host", r.URL)
	case u.User != nil:
		return bad("url must not carry credentials")
	case len(r.Model) > MaxNameBytes || len(r.Instance) > MaxNameBytes:
		return bad("model and instance_id must be at most %d bytes", MaxNameBytes)
	case len(r.DpRanks) == 0:
		return bad("dp_ranks is empty")
	case len(r.DpRanks) > maxRanks:
		return bad("%d dp_ranks, more than the %d allowed (--max-dp-ranks)", len(r.DpRanks), maxRanks)
	case r.BlockSize <= 0 || r.BlockSize > MaxBlockSize:
		return bad("block_size %d must be in [1, %d]", r.BlockSize, MaxBlockSize)
	case r.KVBlocks < 0 || r.MaxBatchedTokens < 0 || r.MaxModelLen < 0:
		return bad("kv_blocks, max_batched_tokens and max_model_len must be >= 0")
	case r.HeartbeatMillis <= 0 || r.HeartbeatMillis > MaxHeartbeatMillis:
		return bad("heartbeat_ms %d must be in [1, %d]", r.HeartbeatMillis, MaxHeartbeatMillis)
	}
	seen := make(map[uint32]struct{}, len(r.DpRanks))
	for _, rank := range r.DpRanks {
		if rank > wire.MaxDPRank {
			return bad("dp rank %d above %d", rank, wire.MaxDPRank)
		}
		if _, dup := seen[rank]; dup {
			return bad("dp rank %d listed twice", rank)
		}
		seen[rank] = struct{}{}
	}
	switch r.EventTransport {
	case TransportDynamo, TransportNative, TransportNone:
	case TransportZMQ:
		if r.ZMQEndpoint == "" {
			return bad("zmq transport without zmq_endpoint")
		}
		for _, ep := range [...]string{r.ZMQEndpoint, r.ZMQReplay} {
			if ep == "" {
				continue
			}
			if len(ep) > MaxURLBytes || !strings.HasPrefix(ep, "tcp://") {
				return bad("zmq endpoint %q must be tcp://host:port", ep)
			}
			if _, _, err := net.SplitHostPort(ep[len("tcp://"):]); err != nil {
				return bad("zmq endpoint %q must be tcp://host:port", ep)
			}
		}
	default:
		return bad("unknown event_transport %q (dynamo, native, zmq or none)", r.EventTransport)
	}
	switch r.Role {
	case "", RoleBoth, RolePrefill, RoleDecode:
	default:
		return bad("unknown role %q (prefill, decode or both)", r.Role)
	}
	switch r.PDProtocol {
	case "", ProtocolVLLMNIXL, ProtocolSGLang:
	default:
		return bad("unknown pd_protocol %q (vllm-nixl or sglang)", r.PDProtocol)
	}
	switch {
	case r.BootstrapPort < 0 || r.BootstrapPort > 65535:
		return bad("bootstrap_port %d must be in [1, 65535]", r.BootstrapPort)
	case r.BootstrapPort != 0 && r.PDProtocol != ProtocolSGLang:
		return bad("bootstrap_port is SGLang's: it needs pd_protocol %q, not %q", ProtocolSGLang, r.ProtocolOrDefault())
	}
	return nil
}

// Load is one dp rank's load, as the engine reports it.
type Load struct {
	WorkerID uint64 `json:"worker_id"`
	DpRank   uint32 `json:"dp_rank"`
	KVUsed   int    `json:"kv_used_blocks"`
	KVTotal  int    `json:"kv_total_blocks"`
	Waiting  int    `json:"waiting"`
	Running  int    `json:"running"`
}

// AllWorkersBusy is published by a router whose queue overflowed, so every
// replica throttles new requests for its rejection window.
//
// A receiver honours it only from a replica it knows (router.Config.Peers)
// and for at most its own rejection window: WindowMillis is the sender's
// window, clamped by the receiver to [0, its own].
type AllWorkersBusy struct {
	Router       string `json:"router"`
	QueueDepth   int    `json:"queue_depth"`
	AtUnixNano   int64  `json:"at_unix_nano"`
	WindowMillis int64  `json:"window_ms,omitempty"`
}

// Decode parses a JSON control-plane message into v with a clear error.
func Decode(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode %T: %w", v, err)
	}
	return nil
}

// Encode marshals a control-plane message.
func Encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("plane: encode %T: %v", v, err)) // only plain structs are encoded
	}
	return b
}
