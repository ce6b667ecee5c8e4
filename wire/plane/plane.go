package plane

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
	WorkerID         uint64   `json:"worker_id"`
	URL              string   `json:"url"`
	Model            string   `json:"model,omitempty"`
	DpRanks          []uint32 `json:"dp_ranks"`
	BlockSize        int      `json:"block_size"`
	KVBlocks         int      `json:"kv_blocks"` // per dp rank
	MaxBatchedTokens int      `json:"max_batched_tokens,omitempty"`
	EventTransport   string   `json:"event_transport"`
	ZMQEndpoint      string   `json:"zmq_endpoint,omitempty"` // with TransportZMQ: rank r publishes on this port + r
	ZMQReplay        string   `json:"zmq_replay,omitempty"`
	HeartbeatMillis  int      `json:"heartbeat_ms"`
}

// Validate checks a registration's fields.
func (r *Registration) Validate() error {
	switch {
	case r.WorkerID == 0:
		return errors.New("registration: worker_id must be > 0")
	case !strings.HasPrefix(r.URL, "http://") && !strings.HasPrefix(r.URL, "https://"):
		return fmt.Errorf("registration of worker %d: url %q must be http(s)", r.WorkerID, r.URL)
	case len(r.DpRanks) == 0:
		return fmt.Errorf("registration of worker %d: dp_ranks is empty", r.WorkerID)
	case r.BlockSize <= 0:
		return fmt.Errorf("registration of worker %d: block_size must be > 0", r.WorkerID)
	case r.HeartbeatMillis <= 0:
		return fmt.Errorf("registration of worker %d: heartbeat_ms must be > 0", r.WorkerID)
	}
	switch r.EventTransport {
	case TransportDynamo, TransportNative, TransportNone:
	case TransportZMQ:
		if r.ZMQEndpoint == "" {
			return fmt.Errorf("registration of worker %d: zmq transport without zmq_endpoint", r.WorkerID)
		}
	default:
		return fmt.Errorf("registration of worker %d: unknown event_transport %q", r.WorkerID, r.EventTransport)
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
type AllWorkersBusy struct {
	Router     string `json:"router"`
	QueueDepth int    `json:"queue_depth"`
	AtUnixNano int64  `json:"at_unix_nano"`
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
