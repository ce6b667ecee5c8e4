package mock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/bench/engine"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// Worker roles in disaggregated prefill/decode serving (the registration's).
const (
	RoleBoth    = plane.RoleBoth    // aggregated: prefill and decode on one engine (the default)
	RolePrefill = plane.RolePrefill // answers prefill legs and keeps their KV for a decode worker
	RoleDecode  = plane.RoleDecode  // pulls a prefill worker's KV, then decodes
)

// Disaggregation protocols, as the engines speak them (the registration's).
const (
	ProtocolNIXL   = plane.ProtocolVLLMNIXL // vLLM's NIXL connector: kv_transfer_params (the default)
	ProtocolSGLang = plane.ProtocolSGLang   // SGLang PD: bootstrap_host, bootstrap_port, bootstrap_room
)

// Defaults of the P/D settings.
const (
	// DefaultTransferGBps is the modelled KV transfer bandwidth between
	// workers, in GB/s: one 400 Gb/s RDMA NIC's line rate.
	DefaultTransferGBps = 50
	// DefaultTransferTimeout is how long a prefill worker keeps a finished
	// prefill's blocks pinned for a decode worker that does not pull them:
	// vLLM's NIXL abort timeout (VLLM_NIXL_ABORT_REQUEST_TIMEOUT, 480 s).
	DefaultTransferTimeout = 480 * time.Second
	// DefaultBootstrapTimeout is how long an SGLang-protocol decode worker
	// waits for the prefill of its bootstrap room before failing.
	DefaultBootstrapTimeout = 300 * time.Second
)

// transferPath is the mock's side channel on a prefill worker's HTTP port,
// from which a decode worker pulls a finished prefill's blocks (what NIXL
// reads over RDMA and SGLang's bootstrap server brokers). Query: key (the
// transfer's name), wait_ms (how long to wait for it to appear).
const transferPath = "/mock/kv_transfer"

func validRole(r string) bool {
	return r == RoleBoth || r == RolePrefill || r == RoleDecode
}

func validProtocol(p string) bool { return p == ProtocolNIXL || p == ProtocolSGLang }

// pdBody is what a worker in a P/D role reads from a completion body
// besides what openai.Parse reads.
type pdBody struct {
	KV            *kvParams `json:"kv_transfer_params"`
	BootstrapHost *string   `json:"bootstrap_host"`
	BootstrapPort *int      `json:"bootstrap_port"`
	BootstrapRoom *uint64   `json:"bootstrap_room"`
}

// kvParams is vLLM's kv_transfer_params object (NIXL connector).
type kvParams struct {
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	RemoteEngineID  *string `json:"remote_engine_id"`
	RemoteBlockIDs  []int   `json:"remote_block_ids"`
	RemoteHost      *string `json:"remote_host"`
	RemotePort      *int    `json:"remote_port"`
	RemoteRequestID *string `json:"remote_request_id"`
	TPSize          int     `json:"tp_size"`
}

// leg is what a P/D worker does with one request.
type leg struct {
	prefill bool   // keep the blocks for a decode worker under key
	key     string // the transfer's name on the prefill worker
	from    string // decode: the prefill worker's host:port to pull from
	wait    time.Duration
}

// pdShared is the P/D state every dp rank of a worker shares: the finished
// prefills waiting for their decode worker, and the decode workers waiting
// for a prefill (SGLang, whose two legs start together).
type pdShared struct {
	host string // the HTTP listener's host and port, announced in kv_transfer_params
	port int
	mu   struct {
		sync.Mutex
		pending map[string]*pendingKV
		waiters map[string]chan struct{} // closed when the key is pending
	}
}

// pendingKV is a finished prefill whose blocks stay pinned in rank's engine
// until pulled or timed out.
type pendingKV struct {
	rank   *Worker
	id     uint64           // the engine request id
	blocks []wire.BlockHash // local hashes of the prompt's full blocks
	timer  *time.Timer
}

// parseLeg reads the P/D fields of a body for a worker of role and
// protocol; nil leg: serve the request as an aggregated one. The error
// names the bad field.
func (w *Worker) parseLeg(body []byte) (*leg, string, error) {
	var b pdBody
	if err := json.Unmarshal(body, &b); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, te.Field, fmt.Errorf("%s: %v", te.Field, err)
		}
		return nil, "", err
	}
	switch {
	case w.cfg.PDProtocol == ProtocolNIXL && w.cfg.Role == RolePrefill:
		if b.KV == nil || !b.KV.DoRemoteDecode {
			return nil, "", nil
		}
		return &leg{prefill: true}, "", nil
	case w.cfg.PDProtocol == ProtocolNIXL && w.cfg.Role == RoleDecode:
		if b.KV == nil || !b.KV.DoRemotePrefill {
			return nil, "", nil
		}
		p := b.KV
		if p.RemoteHost == nil || p.RemotePort == nil || p.RemoteRequestID == nil {
			return nil, "kv_transfer_params", errors.New("kv_transfer_params: do_remote_prefill needs remote_host, remote_port and remote_request_id")
		}
		return &leg{key: "nixl:" + *p.RemoteRequestID, from: net.JoinHostPort(*p.RemoteHost, strconv.Itoa(*p.RemotePort))}, "", nil
	case w.cfg.PDProtocol == ProtocolSGLang && w.cfg.Role == RolePrefill:
		if b.BootstrapRoom == nil {
			return nil, "", nil
		}
		return &leg{prefill: true, key: "room:" + strconv.FormatUint(*b.BootstrapRoom, 10)}, "", nil
	case w.cfg.PDProtocol == ProtocolSGLang && w.cfg.Role == RoleDecode:
		if b.BootstrapRoom == nil {
			return nil, "", nil
		}
		if b.BootstrapHost == nil || b.BootstrapPort == nil {
			return nil, "bootstrap_host", errors.New("bootstrap_room needs bootstrap_host and bootstrap_port")
		}
		return &leg{
			key: "room:" + strconv.FormatUint(*b.BootstrapRoom, 10), from: net.JoinHostPort(*b.BootstrapHost, strconv.Itoa(*b.BootstrapPort)),
			wait: w.cfg.BootstrapTimeout,
		}, "", nil
	}
	return nil, "", nil
}

// errNoTransfer: the prefill worker has no pending transfer of that name.
var errNoTransfer = errors.New("no pending transfer")

// pull fetches a finished prefill's block hashes from the prefill worker
// (which unpins them), waiting up to l.wait for it to appear.
func (w *Worker) pull(l *leg) ([]wire.BlockHash, error) {
	q := url.Values{"key": {l.key}, "wait_ms": {strconv.FormatInt(l.wait.Milliseconds(), 10)}}
	cl := http.Client{Timeout: l.wait + 30*time.Second}
	resp, err := cl.Post("http://"+l.from+transferPath+"?"+q.Encode(), "application/json", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, errNoTransfer
	default:
		return nil, fmt.Errorf("%s answered %d: %s", l.from, resp.StatusCode, body)
	}
	var out struct {
		Blocks []uint64 `json:"blocks"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("%s: transfer answer: %w", l.from, err)
	}
	hs := make([]wire.BlockHash, len(out.Blocks))
	for i, h := range out.Blocks {
		hs[i] = wire.BlockHash(h)
	}
	return hs, nil
}

// transferTime is the modelled time to move blocks blocks between workers,
// divided by Speedup as step times are.
func (w *Worker) transferTime(blocks int) time.Duration {
	bytes := float64(blocks * w.cfg.BlockSize * engine.KVBytesPerToken)
	return time.Duration(bytes / (w.cfg.TransferGBps * 1e9) * float64(time.Second) / w.cfg.Speedup)
}

// hold pins a finished prefill's blocks under key for a decode worker,
// until it pulls them or TransferTimeout passes.
func (w *Worker) hold(key string, c *call) {
	pd := w.pd
	np := c.prompt / w.cfg.BlockSize
	p := &pendingKV{rank: w, id: c.id, blocks: c.local[:np:np]}
	pd.mu.Lock()
	if old := pd.mu.pending[key]; old != nil { // a key reused: the older transfer is dropped
		old.timer.Stop()
		old.rank.unpin(old.id)
	}
	p.timer = time.AfterFunc(w.cfg.TransferTimeout, func() {
		pd.mu.Lock()
		if pd.mu.pending[key] == p {
			delete(pd.mu.pending, key)
			pd.mu.Unlock()
			w.unpin(p.id)
			return
		}
		pd.mu.Unlock()
	})
	pd.mu.pending[key] = p
	if ch := pd.mu.waiters[key]; ch != nil {
		close(ch)
		delete(pd.mu.waiters, key)
	}
	pd.mu.Unlock()
}

func (w *Worker) unpin(id uint64) {
	w.mu.Lock()
	w.mu.eng.Unpin(id)
	w.mu.Unlock()
	w.ring()
}

// take removes and returns the pending transfer key, waiting up to wait
// for it to appear; nil if it did not.
func (pd *pdShared) take(key string, wait time.Duration) *pendingKV {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		pd.mu.Lock()
		if p := pd.mu.pending[key]; p != nil {
			delete(pd.mu.pending, key)
			pd.mu.Unlock()
			p.timer.Stop()
			return p
		}
		if wait <= 0 {
			pd.mu.Unlock()
			return nil
		}
		ch := pd.mu.waiters[key]
		if ch == nil {
			ch = make(chan struct{})
			pd.mu.waiters[key] = ch
		}
		pd.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			pd.mu.Lock()
			if pd.mu.waiters[key] == ch && pd.mu.pending[key] == nil {
				delete(pd.mu.waiters, key)
			}
			p := pd.mu.pending[key]
			if p != nil {
				delete(pd.mu.pending, key)
			}
			pd.mu.Unlock()
			if p != nil {
				p.timer.Stop()
			}
			return p
		}
	}
}

// serveTransfer answers a decode worker's pull: the blocks' hashes, which
// are unpinned (the decode worker has read them).
func (w *Worker) serveTransfer(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	key := string(args.Peek("key"))
	waitMs, _ := strconv.ParseInt(string(args.Peek("wait_ms")), 10, 64)
	if w.pd == nil || key == "" {
		w.fail(ctx, fasthttp.StatusNotFound, "no pending transfer", "not_found_error")
		return
	}
	p := w.pd.take(key, time.Duration(waitMs)*time.Millisecond)
	if p == nil {
		w.fail(ctx, fasthttp.StatusNotFound, "no pending transfer "+key, "not_found_error")
		return
	}
	p.rank.unpin(p.id)
	b := append(make([]byte, 0, 16+21*len(p.blocks)), `{"blocks":[`...)
	for i, h := range p.blocks {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(h), 10)
	}
	b = append(b, "]}"...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// appendKVParams splices the kv_transfer_params of a NIXL prefill answer
// into resp, a JSON object.
func (w *Worker) appendKVParams(resp []byte, reqID string, blocks int) []byte {
	if len(resp) == 0 || resp[len(resp)-1] != '}' {
		return resp
	}
	resp = resp[:len(resp)-1]
	resp = append(resp, `,"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_engine_id":`...)
	resp = strconv.AppendQuote(resp, "mock-"+strconv.FormatUint(w.cfg.ID, 10)+"-"+w.instance)
	resp = append(resp, `,"remote_block_ids":[`...)
	for i := range blocks {
		if i > 0 {
			resp = append(resp, ',')
		}
		resp = strconv.AppendInt(resp, int64(i), 10)
	}
	resp = append(resp, `],"remote_host":`...)
	resp = strconv.AppendQuote(resp, w.pd.host)
	resp = append(resp, `,"remote_port":`...)
	resp = strconv.AppendInt(resp, int64(w.pd.port), 10)
	resp = append(resp, `,"remote_request_id":`...)
	resp = strconv.AppendQuote(resp, reqID)
	resp = append(resp, `,"tp_size":1}}`...)
	return resp
}

// Role returns the worker's role in disaggregated serving.
func (w *Worker) Role() string { return w.cfg.Role }

// BootstrapPort returns the port a decode worker pulls this worker's KV
// from (SGLang's bootstrap_port; NIXL's remote_port): the HTTP port.
func (w *Worker) BootstrapPort() int { return w.pd.port }
