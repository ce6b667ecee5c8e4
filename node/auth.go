package node

import (
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/kvroute/kvroute/wire/plane"
)

// NATS users of the embedded server with Config.NATSAuth.
const (
	RouterUser = "kvroute-router"
	WorkerUser = "kvroute-worker"
)

// authUsers returns the embedded server's users (--nats-auth) with fresh
// random passwords: the router may publish anything but the workers'
// subjects; a worker may publish only registrations, withdrawals, load and
// KV events (and answer the recovery requests it receives), and subscribe
// only to its recovery subjects and inboxes. So only workers can publish
// registrations and events, and only routers all-workers-busy.
func authUsers(s plane.Subjects) (users []*server.User, routerPass, workerPass string) {
	workerPub := []string{s.KVEvents, s.KVEventsNative, s.Load, s.Heartbeat, s.Leave}
	routerPass, workerPass = randomSecret(), randomSecret()
	router := &server.User{Username: RouterUser, Password: routerPass, Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{">"}, Deny: workerPub},
		Subscribe: &server.SubjectPermission{Allow: []string{">"}},
	}}
	worker := &server.User{Username: WorkerUser, Password: workerPass, Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: workerPub},
		Subscribe: &server.SubjectPermission{Allow: []string{s.Recover + ".>", "_INBOX.>"}},
		// Recovery answers go to the requester's reply inbox, in chunks.
		Response: &server.ResponsePermission{MaxMsgs: 1 << 20, Expires: time.Minute},
	}}
	return []*server.User{router, worker}, routerPass, workerPass
}

func randomSecret() string {
	var b [24]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// userURL returns clientURL (nats://host:port) with user and password.
func userURL(clientURL, user, pass string) string {
	u, err := url.Parse(clientURL)
	if err != nil {
		return clientURL
	}
	u.User = url.UserPassword(user, pass)
	return u.String()
}

// writeWorkerURL writes the workers' connection URL to path, readable by
// its owner only.
func writeWorkerURL(path, u string) error {
	if err := os.WriteFile(path, []byte(u+"\n"), 0o600); err != nil {
		return fmt.Errorf("--nats-auth-file %s: %w", path, err)
	}
	return nil
}
