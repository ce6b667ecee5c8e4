package indexer

import (
	"github.com/kvroute/kvroute/internal/httpref"
	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/wire/openai"
)

// route is an endpoint of the indexer's HTTP API and the handler's
// endpoint for it.
type route struct {
	httpref.Route
	ep endpoint
}

// routes is the indexer's API (Dynamo's standalone KV indexer's, see the
// package doc): what handle matches and what the API reference says.
var routes = [...]route{
	{httpref.Route{Method: "POST", Path: "/register",
		Summary:  "Subscribe to an engine's ZMQ KV events (rank dp_rank) and register it for a model and tenant",
		Request:  `{"instance_id", "endpoint", "model_name", "block_size", "tenant_id"?, "dp_rank"?, "replay_endpoint"?}`,
		Response: `{"status": "ok", "instance_id", "model_name", "tenant_id", "dp_rank"}`}, epRegister},
	{httpref.Route{Method: "POST", Path: "/unregister",
		Summary:  "Unsubscribe an engine (one dp rank, or all) and drop its blocks from the index",
		Request:  `{"instance_id", "model_name", "tenant_id"?, "dp_rank"?}`,
		Response: `{"status": "ok", "instance_id"}`}, epUnregister},
	{httpref.Route{Method: "GET", Path: "/workers",
		Summary:  "The engines registered over HTTP",
		Response: `[{"instance_id", "model_name", "tenant_id", "endpoints": {"<dp_rank>": endpoint}}]`}, epWorkers},
	{httpref.Route{Method: "POST", Path: "/query",
		Summary:  "The cached prefix of a prompt on each worker of the model and tenant, from its token ids",
		Request:  `{"token_ids", "model_name", "tenant_id"?, "lora_name"?}`,
		Response: `{"scores": {"<instance_id>": {"<dp_rank>": matched tokens}}, "frequencies": [workers holding block 0, block 1, …], "tree_sizes": {"<instance_id>": {"<dp_rank>": blocks}}}`}, epQuery},
	{httpref.Route{Method: "POST", Path: "/query_by_hash",
		Summary:  "As /query, from the prompt's local block hashes",
		Request:  `{"block_hashes", "model_name", "tenant_id"?}`,
		Response: "as /query"}, epQueryByHash},
	{httpref.Route{Method: "GET", Path: "/dump",
		Summary:  "Every stored block of the index, as events per worker key (what --peers loads at start)",
		Response: `{"<model_name>:<tenant_id>": [{"worker_id", "dp_rank", "parent_hash"?, "blocks": [{"engine_hash", "local_hash"}], "lora_name"?}]}`}, epDump},
	{httpref.Route{Method: "GET", Path: "/health",
		Summary:  "200 once the indexer is ready (NATS and JetStream reached, its peer's dump loaded, its event plane up), else 503 saying why",
		Response: `{"status": "ok"} or {"status": "starting: waiting for JetStream: …"}`}, epHealth},
	{httpref.Route{Method: "GET", Path: "/ready",
		Summary:  "As /health: 200 when ready to serve queries, else 503 saying why",
		Response: `{"status": "ok"} or {"status": "<why not>"}`}, epReady},
	{httpref.Route{Method: "GET", Path: "/metrics",
		Summary:  "Prometheus metrics (docs/reference/metrics.md)",
		Response: "Prometheus text format 0.0.4"}, epMetrics},
}

// routeMethod is the method of each endpoint's route.
var routeMethod [numEndpoints]string

func init() {
	for _, rt := range routes {
		routeMethod[rt.ep] = rt.Method
	}
}

// endpointOf returns the endpoint of a path, epOther if none.
func endpointOf(path []byte) endpoint {
	for i := range routes {
		if string(path) == routes[i].Path {
			return routes[i].ep
		}
	}
	return epOther
}

// Routes returns the indexer's API endpoints (--http-addr). The slice is
// the caller's.
func Routes() []httpref.Route {
	out := make([]httpref.Route, len(routes))
	for i := range routes {
		out[i] = routes[i].Route
	}
	return out
}

// errorTable is every error answer the indexer writes. TestErrorTable
// checks it against the statuses the package's code writes.
var errorTable = []httpref.Error{
	{Status: 400,
		When: "A body that is not JSON or has an unknown field; a required field missing (instance_id, endpoint, model_name, token_ids, block_hashes); a field of the other query's; a block_size other than --block-size; an instance registered for another model or tenant; an endpoint that cannot be subscribed to"},
	{Status: 404,
		When: "No such path; /unregister of an instance not registered for that model (or without that dp_rank)"},
	{Status: 405,
		When: "A method other than the route's"},
	{Status: 500,
		When: "An answer that cannot be encoded as JSON"},
	{Status: 503,
		When: "/query, /query_by_hash or /dump while the index is closed"},
}

// Errors returns the error answers of the indexer's API, type and code
// filled in (openai.StatusError's). The slice is the caller's.
func Errors() []httpref.Error { return httpref.Fill(errorTable, statusDefaults) }

// statusDefaults are the type and code WriteError gives a status.
func statusDefaults(status int) (typ, code string) {
	e := openai.StatusError(status, "")
	return e.Type, e.Code
}

// MetricFamilies returns every family the indexer's /metrics can write, in
// declaration order. The slice is the registry's: do not modify it.
func MetricFamilies() []promtext.Family { return registry.Families() }
