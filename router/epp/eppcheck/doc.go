// Package eppcheck is a conformance harness for endpoint pickers (EPPs)
// speaking Envoy's external-processing protocol as the Gateway API
// Inference Extension uses it. It plays Envoy's ext_proc filter (the same
// message sequence, 16 KiB body chunks with end of stream on the last, the
// subset hint as metadata, the response path with the served endpoint) and
// checks each rule against any address: Checker.Run, or `kvroute epp-check
// --target ADDR`. docs/epp-check.md lists the checks.
//
// Gateway plays Envoy in front of an EPP for HTTP clients (`kvroute
// epp-check --serve-envoy LISTEN`): it asks the EPP, forwards the body the
// EPP streamed back to the picked pod (then the fallbacks, on connection
// failure) and relays the answer through the response path.
//
// Nothing here is goroutine-unsafe except a Checker's Run (one at a time).
package eppcheck
