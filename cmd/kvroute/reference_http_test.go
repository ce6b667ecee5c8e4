package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/indexer"
	"github.com/kvroute/kvroute/internal/httpref"
	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/wire/openai"
)

// httpReference renders docs/reference/http-api.md from the route and
// error tables the router's and the indexer's handlers use.
func httpReference(t *testing.T) []byte {
	flags := collectFlags(t)
	def := func(cmd, name string) string {
		for i, fc := range flagCommands {
			if strings.Join(fc.args, " ") != cmd {
				continue
			}
			for _, f := range flags[i] {
				if f.name == name {
					return f.def
				}
			}
		}
		t.Fatalf("kvroute %s has no flag --%s", cmd, name)
		return ""
	}
	var b strings.Builder
	b.WriteString(generatedNote)
	b.WriteString("# HTTP API reference\n\n")
	b.WriteString("The endpoints of `kvroute serve` (the router) and `kvroute indexer`, and their error answers, generated from\n" +
		"the route and error tables their handlers use. Bodies are JSON unless said otherwise; a field followed by `?` is\n" +
		"optional.\n\n")
	b.WriteString("- [Router](#router)\n- [Router admin listener](#router-admin-listener)\n- [Router errors](#router-errors)\n" +
		"- [Indexer](#indexer)\n- [Indexer errors](#indexer-errors)\n")

	fmt.Fprintf(&b, "\n## Router\n\nServed on `--http-addr` (default `%s`). A method other than the route's gets 405.\n\n", def("serve", "http-addr"))
	writeRoutes(&b, router.Routes())
	fmt.Fprintf(&b, "\n## Router admin listener\n\nServed on `--admin-addr` (default `%s`) with `--pprof`.\n\n", def("serve", "admin-addr"))
	writeRoutes(&b, router.AdminRoutes())
	b.WriteString("\n## Router errors\n\n")
	// The example is what badRequest writes for a FieldError (router/http.go).
	fe := &openai.FieldError{Param: "overrides.worker_id", Msg: "overrides.worker_id 9 names no known worker (GET /workers lists them)"}
	bad := openai.StatusError(400, "")
	example := openai.AppendError(nil, openai.Error{Message: fe.Error(), Type: bad.Type, Param: openai.ParamOf(fe), Code: bad.Code})
	b.WriteString("An error is an OpenAI-style JSON body, `{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`, whose param names the\n" +
		"field at fault (null when none), e.g. a 400 from `POST /route`:\n\n```json\n" + string(example) + "\n```\n\n" +
		"Errors inside a streamed answer (after its 200 and headers went out) are SSE events with the same body,\n" +
		"`data: {\"error\": {…}}`.\n\n")
	writeErrors(&b, t, router.Errors())

	fmt.Fprintf(&b, "\n## Indexer\n\nServed on `--http-addr` (default `%s`): Dynamo's standalone KV indexer API. A method other\n"+
		"than the route's gets 405.\n\n", def("indexer", "http-addr"))
	writeRoutes(&b, indexer.Routes())
	b.WriteString("\n## Indexer errors\n\nThe same JSON body as the router's; the message names the field at fault, param is null.\n\n")
	writeErrors(&b, t, indexer.Errors())
	return []byte(b.String())
}

func writeRoutes(b *strings.Builder, routes []httpref.Route) {
	b.WriteString("| Method | Path | What it does | Request | Response |\n|---|---|---|---|---|\n")
	for _, r := range routes {
		req := mdCell(r.Request)
		if req == "" {
			req = "none"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", r.Method, mdCode(r.Path), mdCell(r.Summary), req, mdCell(r.Response))
	}
}

func writeErrors(b *strings.Builder, t *testing.T, errs []httpref.Error) {
	b.WriteString("| Status | Type | Code | Param | When |\n|---|---|---|---|---|\n")
	for _, e := range errs {
		status := strconv.Itoa(e.Status)
		if e.Stream {
			status += " (stream event)"
		}
		typ, code, param := mdCode(e.Type), mdCode(e.Code), mdCell(e.Param)
		if e.Plain {
			typ, code, param = "plain text", "", ""
		} else if param == "" {
			param = "null"
		}
		if e.When == "" {
			t.Errorf("error %d %s: no When", e.Status, e.Code)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", status, typ, code, param, mdCell(e.When))
	}
}
