package indexer_test

import (
	"strings"
	"testing"

	"github.com/kvroute/kvroute/indexer"
	"github.com/kvroute/kvroute/internal/natstest"
)

// TestRoutesServed: every route of the table is served with its method
// (another method gets 405), and a path outside the table gets 404.
func TestRoutesServed(t *testing.T) {
	s := startIndexer(t, natstest.Server(t), "routes")
	base := "http://" + s.Addr()
	routes := indexer.Routes()
	if len(routes) == 0 {
		t.Fatal("no routes")
	}
	for _, rt := range routes {
		code, body := call(t, rt.Method, base+rt.Path, "")
		if code == 405 || code == 404 && strings.Contains(string(body), "no such endpoint") {
			t.Errorf("%s %s: %d %s", rt.Method, rt.Path, code, body)
		}
		other := "GET"
		if rt.Method == "GET" {
			other = "POST"
		}
		if code, body := call(t, other, base+rt.Path, ""); code != 405 {
			t.Errorf("%s %s: %d %s, want 405", other, rt.Path, code, body)
		}
	}
	for _, p := range []string{"/", "/query/", "/v1/completions", "/route"} {
		if code, _ := call(t, "GET", base+p, ""); code != 404 {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}
}
