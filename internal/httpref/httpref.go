// Package httpref describes an HTTP API for its reference
// (docs/reference/http-api.md): its routes, which the services' handlers
// match against, and its error answers. Plain data, no I/O.
package httpref

import "strings"

// Route is one endpoint of an HTTP API. Plain data.
type Route struct {
	Method string
	// Path is matched exactly; with a {param} segment, every path that
	// starts with the part before the first "{" matches (see Prefix).
	Path     string
	Summary  string
	Request  string // the body's shape; "" when it takes none
	Response string // the answer's shape
}

// Prefix returns the part of Path a request path is compared with, and
// whether Path has a {param} segment (so that a request path need only
// start with it).
func (r *Route) Prefix() (string, bool) {
	if i := strings.IndexByte(r.Path, '{'); i >= 0 {
		return r.Path[:i], true
	}
	return r.Path, false
}

// Error is one kind of error answer of an HTTP API. Plain data.
type Error struct {
	Status int
	// Type and Code are the JSON error body's; empty means the defaults
	// for Status, which Fill writes in.
	Type, Code string
	// Param says what the body's param names; "" for null.
	Param string
	// Stream marks an error sent as an SSE event inside a streamed 200
	// answer, after the headers went out.
	Stream bool
	// Plain marks an answer the HTTP server writes in plain text, not
	// JSON: no type, code or param.
	Plain bool
	When  string
}

// Fill returns a copy of errs with every empty Type and Code set to the
// defaults for its Status (the service's, e.g. openai.StatusError's); Plain
// answers keep none.
func Fill(errs []Error, defaults func(status int) (typ, code string)) []Error {
	out := append([]Error(nil), errs...)
	for i := range out {
		if out[i].Plain {
			continue
		}
		typ, code := defaults(out[i].Status)
		if out[i].Type == "" {
			out[i].Type = typ
		}
		if out[i].Code == "" {
			out[i].Code = code
		}
	}
	return out
}
