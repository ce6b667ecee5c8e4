package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultJetStreamWait is Config.JetStreamWait's default: how long Start
// waits for JetStream to answer. A 3-node cluster started at the same time
// as kvroute elects its JetStream leader within seconds; five minutes also
// covers nodes started one after another by hand or by an orchestrator.
const DefaultJetStreamWait = 5 * time.Minute

// jetStreamAttempt bounds one JetStream request while waiting (or a quarter
// of Config.JetStreamWait if that is shorter): a request sent before the
// cluster had a leader may never be answered, so it is sent again rather
// than waited on (nats.go's own JetStream API timeout is also 5 s).
const jetStreamAttempt = 5 * time.Second

// Pauses between attempts: doubling from jetStreamRetryMin up to
// jetStreamRetryMax.
const (
	jetStreamRetryMin = 250 * time.Millisecond
	jetStreamRetryMax = 5 * time.Second
)

// waitJetStream runs f (one JetStream request or a few, bounded by the
// context it is given) until it succeeds, fails with an error that waiting
// does not cure (jetStreamTransient), or Config.JetStreamWait has passed.
// Each failed attempt is logged with what is waited for, the error and
// when it gives up, and reported through Config.Starting.
func (n *Node) waitJetStream(what string, f func(ctx context.Context) error) error {
	start := time.Now()
	deadline := start.Add(n.cfg.JetStreamWait)
	pause := jetStreamRetryMin
	n.starting("waiting for JetStream: " + what)
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), min(jetStreamAttempt, n.cfg.JetStreamWait/4, max(time.Until(deadline), time.Millisecond)))
		err := f(ctx)
		cancel()
		if err == nil {
			if attempt > 1 {
				n.cfg.Logger.Info("JetStream answered", "for", what, "attempts", attempt, "waited", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if !jetStreamTransient(err) {
			return err
		}
		if time.Now().Add(pause).After(deadline) {
			return fmt.Errorf("JetStream did not answer within %v (--jetstream-wait) for %s: %w", n.cfg.JetStreamWait, what, err)
		}
		n.cfg.Logger.Warn("waiting for JetStream (a cluster without a JetStream leader yet, or a server without JetStream)",
			"for", what, "attempt", attempt, "err", err, "retry_in", pause, "gives_up_in", time.Until(deadline).Round(time.Second))
		select {
		case <-time.After(pause):
		case <-n.cfg.Abort:
			return fmt.Errorf("stopped while waiting for JetStream for %s: %w", what, err)
		}
		pause = min(2*pause, jetStreamRetryMax)
	}
}

// jetStreamTransient reports whether a JetStream request's error may go
// away by waiting: no answer (a cluster that has no JetStream leader yet
// drops or does not route the request), no responders (JetStream not up
// yet, which nats.go reports as not enabled), the connection between
// servers, or the cluster's own "temporarily unavailable", "insufficient
// resources" (not every replica's node has joined yet) and "offline"
// answers. Anything else (a configuration the server refuses, a stream
// capturing other subjects) fails at once.
func jetStreamTransient(err error) bool {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrConnectionReconnecting):
		return true
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case 10008, // JetStream system temporarily unavailable
			10023,        // insufficient resources (replicas on nodes that have not joined)
			10118, 10194: // stream is offline
			return true
		}
	}
	return false
}

// starting reports what Start is doing to Config.Starting.
func (n *Node) starting(what string) {
	if n.cfg.Starting != nil {
		n.cfg.Starting(what)
	}
}
