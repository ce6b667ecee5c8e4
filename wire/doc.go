// Package wire provides everything that crosses the wire at kvroute's core:
// the normalized KV event type, block and sequence hashing bit-compatible with
// Dynamo's router, and the decoders and encoders for the KV-event formats that
// engines publish (vLLM/SGLang ZMQ msgpack, Dynamo's NATS event plane, and
// kvroute's native binary batch).
package wire
