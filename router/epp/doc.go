// Package epp provides `kvroute epp`: an endpoint picker for Kubernetes
// inference gateways (the Gateway API Inference Extension's Endpoint Picker
// Protocol), served as Envoy's external processor
// (envoy.service.ext_proc.v3.ExternalProcessor/Process) over a
// router.Router, so that the gateway's Envoy asks kvroute which pod gets
// each request and proxies it there itself. The index, tokenizing and
// hashing, scheduler, queue, shedding and bookings are the router's, the
// same as `kvroute serve` uses (router.Router.Pick).
//
//	s, err := epp.New(epp.Config{Router: svc.Router, Fallbacks: 2})
//	g := grpc.NewServer()
//	s.Register(g) // ExternalProcessor and grpc.health.v1
//	go g.Serve(ln)
//	...
//	g.GracefulStop(); s.Close()
//
// # One stream per HTTP request
//
// Envoy's ext_proc filter runs with request headers SEND, request body
// FULL_DUPLEX_STREAMED, request trailers SEND, response headers SEND,
// response body FULL_DUPLEX_STREAMED (STREAMED is accepted: the response
// body then passes unanswered). Process reads the request headers (:path
// says completion or chat; the envoy.lb.subset_hint metadata's
// x-gateway-destination-endpoint-subset restricts the candidates), buffers
// the body to its end of stream (at most Config.MaxBodyBytes, else 413),
// decides, then answers the headers with x-gateway-destination-endpoint:
// "ip:port" of the chosen pod then up to Config.Fallbacks others in cost
// order, set as a header and as envoy.lb dynamic metadata, with
// clear_route_cache; and streams the body back unchanged in chunks of at
// most MaxChunk bytes, end of stream on the last. A worker serving several
// dp ranks behind one address also gets x-data-parallel-rank. A request
// the router refuses is an ImmediateResponse with `kvroute serve`'s status
// and JSON error body: 400 for a bad body (the field named), 404 for an
// unknown model, 429 with Retry-After when shed, 503 when no worker (or
// none of the subset) can take it. A queued request holds its stream until
// it is admitted or shed. GET /v1/models is answered with the fleet's
// models (their union, as `kvroute serve` answers it); another request
// without a body goes to a routable pod in turn, nothing booked.
//
// On the response path the first response body chunk marks the prefill
// done; the response's end of stream, its trailers, or the stream's end
// (Envoy cancels it when the client leaves) frees the booking. When the
// response headers carry envoy.lb's x-gateway-destination-endpoint-served
// naming another pod (Envoy used a fallback) the booking moves there.
//
// # Health and endpoints
//
// grpc.health.v1 answers for "liveness" (always SERVING while the process
// runs), "readiness", "envoy.service.ext_proc.v3.ExternalProcessor" and ""
// (SERVING while router.Router.Routable: a routable worker, ingest running,
// the event plane up), re-evaluated every Config.HealthInterval.
//
// Pods map to workers by "ip:port": registrations' URLs, --worker, and an
// endpoints file (WatchEndpoints: a YAML or JSON list of pods with ip,
// port, worker_id, model, role, dp_ranks; re-read when its content
// changes; prefill pods are not picked). Package eppcheck is the
// conformance harness that checks all of this against any EPP.
package epp
