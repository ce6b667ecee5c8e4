package router

import (
	"net/http"
	"net/http/pprof"

	"github.com/kvroute/kvroute/internal/httpref"
	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/wire/openai"
)

// route is an endpoint of the router's API and the handler's endpoint
// for it.
type route struct {
	httpref.Route
	ep endpoint
}

// routes is the router's API: what Handler serves (endpointOf, method)
// and what the reference lists, in this order.
var routes = [...]route{
	{httpref.Route{Method: "POST", Path: "/v1/completions",
		Summary:  "Route an OpenAI completion to the worker with the best cached prefix and load, and proxy it (SSE streamed chunk by chunk with \"stream\": true)",
		Request:  `OpenAI completion: {"model", "prompt" (text, or token ids), "max_tokens", "stream", …}; lora_name, cache_salt and mm_hashes seed the block hashes`,
		Response: "the worker's answer, with headers X-Kvroute-Worker, X-Kvroute-Dp-Rank and X-Kvroute-Cached-Blocks; in a fleet with prefill workers, a disaggregated request's answer is its decode worker's, and X-Kvroute-Prefill-Worker names its prefill worker (README: Disaggregated prefill/decode)"}, epCompletions},
	{httpref.Route{Method: "POST", Path: "/v1/chat/completions",
		Summary:  "As /v1/completions for a chat: the messages are rendered with the model's chat template and tokenized",
		Request:  `OpenAI chat completion: {"model", "messages", "max_tokens", "stream", …}`,
		Response: "the worker's answer, with the X-Kvroute-* headers"}, epChat},
	{httpref.Route{Method: "POST", Path: "/route",
		Summary:  "Decide a worker without proxying; the request's load stays booked until /route/{request_id}/free or --request-expiry",
		Request:  `{"token_ids" | "prompt" | "messages", "model", "request_id", "lora_name", "cache_salt", "mm_hashes", "explain", "overrides": {"overlap_score_weight", "router_temperature", "worker_id", "dp_rank", "allowed_workers"}}`,
		Response: `{"request_id", "worker_id", "dp_rank", "url", "overlap_blocks", "prompt_blocks", "candidates" (with "explain": true)}; in a fleet with prefill workers, beside these (which name the decode worker): "prefill": {"worker_id", "dp_rank", "url", "overlap_blocks"} or null (served on the decode worker alone), "decode": {…}, "disagg_rule" (remote, short-prompt, load, prefill-busy) and, with "explain", "prefill_candidates", each candidate with its "role"`}, epRoute},
	{httpref.Route{Method: "POST", Path: "/route/{request_id}/{action}",
		Summary:  "Report a /route decision's progress: action prefill_done (its prefill ended; a disaggregated pair's prefill booking ends) or free (it finished; its load is released)",
		Response: `{"request_id", "status": action}`}, epRouteOp},
	{httpref.Route{Method: "GET", Path: "/v1/models",
		Summary:  "The union of the models the workers serve",
		Response: `OpenAI model list: {"object": "list", "data": [{"id", "object": "model", …}]}`}, epModels},
	{httpref.Route{Method: "GET", Path: "/workers",
		Summary:  "The worker table with each dp rank's load as the scheduler sees it",
		Response: `{"workers": [{"worker_id", "url", "model", "models", "static", "role", "pd_protocol", "bootstrap_port" (when declared), "pd_capable", "event_transport", "uptime_seconds", "health", "ranks": [{"dp_rank", "requests", "active_blocks", "prefill_tokens", "kv_total_blocks", "kv_used_blocks", "waiting", "tree_blocks", "decisions", "busy"}]}]}], "tenants": [{"name", "waiting": [critical, standard, sheddable], "share"}]}`}, epWorkers},
	{httpref.Route{Method: "GET", Path: "/health",
		Summary:  "Liveness: 200 while the process serves HTTP",
		Response: `{"status": "ok"}`}, epHealth},
	{httpref.Route{Method: "GET", Path: "/ready",
		Summary:  "Readiness: 200 while the router can route; 503 with the reason while shutting down, while NATS is down, with no routable worker, or while KV-event ingest is not running",
		Response: `{"status": "ready", "workers": N}`}, epReady},
	{httpref.Route{Method: "GET", Path: "/metrics",
		Summary:  "Prometheus metrics (docs/reference/metrics.md)",
		Response: "Prometheus text format 0.0.4"}, epMetrics},
}

// pathEndpoint is a path endpointOf compares and its endpoint.
type pathEndpoint struct {
	path string
	ep   endpoint
}

// The routes as endpointOf and Handler look them up, built from routes at
// init: the exact paths by length (so that a lookup compares one or two
// strings, as a switch does), the {param} routes' prefixes, and per
// endpoint its method and matched path or prefix.
var (
	exactPaths  [][]pathEndpoint
	prefixPaths []pathEndpoint
	routeMethod [numEndpoints]string
	routeMatch  [numEndpoints]string
)

func init() {
	for _, rt := range routes {
		p, param := rt.Prefix()
		routeMethod[rt.ep], routeMatch[rt.ep] = rt.Method, p
		if param {
			prefixPaths = append(prefixPaths, pathEndpoint{p, rt.ep})
			continue
		}
		for len(exactPaths) <= len(p) {
			exactPaths = append(exactPaths, nil)
		}
		exactPaths[len(p)] = append(exactPaths[len(p)], pathEndpoint{p, rt.ep})
	}
}

// Routes returns the router's API endpoints (--http-addr), in the
// reference's order. The slice is the caller's.
func Routes() []httpref.Route {
	out := make([]httpref.Route, len(routes))
	for i := range routes {
		out[i] = routes[i].Route
	}
	return out
}

// adminRoute is an endpoint of the admin listener and its handler.
type adminRoute struct {
	httpref.Route
	handler func(s *Service) http.HandlerFunc
}

// adminRoutes is the admin listener (--admin-addr, with --pprof).
var adminRoutes = []adminRoute{
	{httpref.Route{Method: "GET", Path: "/metrics", Summary: "Prometheus metrics, as the API's /metrics", Response: "Prometheus text format 0.0.4"},
		func(s *Service) http.HandlerFunc {
			return func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/plain; version=0.0.4")
				s.Router.WritePrometheus(w)
			}
		}},
	{httpref.Route{Method: "GET", Path: "/debug/decisions", Summary: "The last n routing decisions (?n=N, default 100, at most --decision-ring), newest first: request id, rule (cost, override, queue, shed), chosen rank, candidates' overlaps (and costs for sampled decisions), the engine's reported cached tokens once known",
		Response: `{"decisions": [{"id", "request_id", "time", "rule", "prompt_blocks", "worker_id", "dp_rank", "overlap_blocks", "host_overlap_blocks", "cost", "reported_cached_tokens", "verified", "candidates": [{"worker_id", "dp_rank", "overlap_blocks", "host_overlap_blocks", "cost", "chosen"}]}]}`},
		func(s *Service) http.HandlerFunc { return s.debugDecisions }},
	{httpref.Route{Method: "GET", Path: "/tenants", Summary: "Each tenant's weight, rate limit, bucket, waiting requests per class and share of the prompt tokens served; running requests per class; session bindings",
		Response: `{"tenants": [{"name", "weight", "rate", "burst", "bucket_tokens", "waiting": [critical, standard, sheddable], "served_prompt_tokens", "routed", "share"}], "running": {"critical", "standard", "sheddable"}, "sessions"}`},
		tenantsHandler},
	{httpref.Route{Method: "GET", Path: "/debug/pprof/", Summary: "Index of the Go runtime's profiles; /debug/pprof/NAME serves one (heap, goroutine, allocs, block, mutex, threadcreate)", Response: "net/http/pprof"},
		func(*Service) http.HandlerFunc { return pprof.Index }},
	{httpref.Route{Method: "GET", Path: "/debug/pprof/cmdline", Summary: "The process's command line", Response: "net/http/pprof"},
		func(*Service) http.HandlerFunc { return pprof.Cmdline }},
	{httpref.Route{Method: "GET", Path: "/debug/pprof/profile", Summary: "A CPU profile over ?seconds=N (default 30)", Response: "net/http/pprof"},
		func(*Service) http.HandlerFunc { return pprof.Profile }},
	{httpref.Route{Method: "GET", Path: "/debug/pprof/symbol", Summary: "Program counters to function names", Response: "net/http/pprof"},
		func(*Service) http.HandlerFunc { return pprof.Symbol }},
	{httpref.Route{Method: "GET", Path: "/debug/pprof/trace", Summary: "An execution trace over ?seconds=N (default 1)", Response: "net/http/pprof"},
		func(*Service) http.HandlerFunc { return pprof.Trace }},
}

// AdminRoutes returns the admin listener's endpoints (--admin-addr, served
// with --pprof). The slice is the caller's.
func AdminRoutes() []httpref.Route {
	out := make([]httpref.Route, len(adminRoutes))
	for i := range adminRoutes {
		out[i] = adminRoutes[i].Route
	}
	return out
}

// adminMux serves adminRoutes.
func (s *Service) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	for _, a := range adminRoutes {
		mux.HandleFunc(a.Path, a.handler(s))
	}
	return mux
}

// errorTable is every error answer the router writes. TestErrorTable
// checks it against the statuses and codes the package's code writes.
var errorTable = []httpref.Error{
	{Status: 400, Param: "the field (prompt, messages, model, request_id, overrides.worker_id, …) or null",
		When: "An X-Kvroute-Priority header other than critical, standard or sheddable; a body that is not a JSON object, a field of the wrong type or out of range, an empty prompt, a /route override naming an unknown worker or dp rank, or a prompt that cannot fit the largest worker's KV capacity"},
	{Status: 400, Code: "context_length_exceeded", Param: "prompt or messages",
		When: "A prompt longer than every worker's limit: --max-prompt-tokens (default 1Mi tokens), lowered by the worker's registered max_model_len, or replaced by it when the flag is unset; found before the prompt is tokenized whole"},
	{Status: 400,
		When: "Malformed HTTP: the request line or headers cannot be parsed (the connection is then closed)"},
	{Status: 404,
		When: "No such path; /route/{request_id}/{action} with an action other than prefill_done or free, or a request_id that is not active (never routed, freed, or expired)"},
	{Status: 404, Type: openai.TypeInvalidRequest, Code: openai.CodeModelNotFound, Param: "model",
		When: "A request naming a model no worker serves"},
	{Status: 405,
		When: "A method other than the route's; the Allow header names the right one"},
	{Status: 408,
		When: "The request was not received within --http-read-timeout"},
	{Status: 409,
		When: "/route with a request_id that is already active"},
	{Status: 413,
		When: "A body over --max-body-bytes"},
	{Status: 429,
		When: "The all-workers-busy window is open (this router's queue overflowed, or a --router-peers replica's did); Retry-After is the window's rest"},
	{Status: 429,
		When: "The predicted wait in the scheduler queue nears --max-queue-wait (early shedding); Retry-After is the bound in seconds"},
	{Status: 429,
		When: "The request's tenant is over its rate limit of prompt tokens (--tenants); Retry-After is when its bucket will hold the prompt. The request takes no queue space"},
	{Status: 431,
		When: "A request line and headers over --max-header-bytes"},
	{Status: 502,
		When: "The chosen worker cannot be reached, or breaks off a non-streamed answer, and neither can the worker the request is retried on; a prefill worker answered a disaggregated request's prefill leg without kv_transfer_params (the message names it; it is routed as an aggregated worker since)"},
	{Status: 503,
		When: "No workers (none registered or configured, or all down); evicted from the full scheduler queue by a request of a higher priority class (Retry-After: 1); the decision queue full or --queue-timeout passed (Retry-After: 1); the worker left before the request was forwarded; the bodies in flight over --max-inflight-body-bytes (Retry-After: 1); /ready while not ready; /workers while the scheduler does not answer"},
	{Status: 503, Plain: true,
		When: "A connection over --max-conns: the HTTP server answers in plain text and closes it"},
	{Status: 504,
		When: "A non-streamed request whose worker sent nothing within the client's own deadline (X-Stainless-Timeout, when shorter than --worker-response-timeout); the worker is not blamed"},
	{Status: 200, Stream: true, Type: openai.TypeServer, Code: openai.CodeWorkerStreamInterrupt,
		When: "The worker broke off a streamed answer (read error, or its end before data: [DONE])"},
	{Status: 200, Stream: true, Type: openai.TypeServer, Code: openai.CodeShuttingDown,
		When: "A stream still running when --shutdown-grace ran out"},
}

// Errors returns the error answers of the router's API, Type and Code
// filled in. The slice is the caller's.
func Errors() []httpref.Error { return httpref.Fill(errorTable, statusDefaults) }

// statusDefaults are the type and code WriteError gives a status.
func statusDefaults(status int) (typ, code string) {
	e := openai.StatusError(status, "")
	return e.Type, e.Code
}

// MetricFamilies returns every family the router's /metrics can write, in
// declaration order. The slice is the registry's: do not modify it.
func MetricFamilies() []promtext.Family { return registry.Families() }
