package router

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/sched"
)

// With replica sync on, a session bound by replica A's decision is bound
// on replica B too.
func TestReplicaSyncSharesSessions(t *testing.T) {
	ttl := func(c *sched.Config) { c.SessionTTL = time.Minute }
	a := startEnv(t, envOptions{workers: 4, routerID: "a", sync: true, sched: ttl})
	b := startReplica(t, a, "b", true, 0, ttl)
	toks := tokens(1, 0, 4*testBlockSize, 8)
	req, _ := http.NewRequest("POST", a.url+"/route", strings.NewReader(fmt.Sprintf(`{"token_ids":%s,"request_id":"s1"}`, promptJSON(toks))))
	req.Header.Set(HeaderSession, "conversation-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/route: %d", resp.StatusCode)
	}
	sessions := func(e *env) int {
		ans, err := e.svc.Router.Tenants()
		if err != nil {
			t.Fatal(err)
		}
		return ans.Sessions
	}
	if n := sessions(a); n != 1 {
		t.Fatalf("A holds %d sessions, want 1", n)
	}
	waitFor(t, "A's session binding on B", func() bool { return sessions(b) == 1 })
}
