// Package zmq provides vLLM's KV-event transport over ZeroMQ, both ends: a
// Publisher (a PUB socket sending [topic, seq, payload] multipart messages and
// a ROUTER socket that replays buffered batches by sequence number, as vLLM's
// ZmqEventPublisher does) and a Subscriber (a SUB socket that dials an
// engine, keeps re-dialing one that is not up yet or restarts, tracks
// sequence numbers, and fills gaps from the engine's replay socket).
//
// The payload is opaque here; wire decodes it. Sequence numbers are 8-byte
// big-endian and start at 0, as in vLLM. Replay protocol: the client sends
// ["", start_seq] from a DEALER (or [start_seq] from a REQ); the publisher
// answers [ "", topic, seq, payload ] for every buffered batch with seq ≥
// start_seq, then [ "", "", END_SEQ, "" ] with END_SEQ = -1 as 8 bytes. The
// subscriber also accepts SGLang's and older vLLM's replies without the topic
// frame.
//
// A subscriber's connections are bounded: zmq4 allocates a frame's announced
// size before reading it, so the subscriber dials through a transport
// (bounded.go) that follows the ZMTP framing and closes a connection whose
// frame or multipart message would exceed SubscriberConfig.MaxMessageBytes
// (--max-event-bytes), counted in SubscriberStats.Oversized
// (FuzzBoundedConnScan fuzzes the framing check).
//
// Pure Go (github.com/go-zeromq/zmq4): no libzmq needed.
package zmq
