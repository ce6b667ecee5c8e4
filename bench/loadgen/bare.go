package loadgen

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/wire/proxy"
)

// BareProxy is the floor of kvroute's proxying stack: a fasthttp server that
// sends each request, unparsed, to the next of its workers in turn with
// wire/proxy (kvroute serve's defaults: first-byte and response bounds on)
// and relays the answer. No tokenizing, hashing, index lookup, scheduling or
// metrics: what it costs per request beyond nginx is the stack's, not KV
// routing's. bench-proxy runs it as the system "bare".
type BareProxy struct {
	p       *proxy.Proxy
	workers []string // base URLs
	next    atomic.Uint64
	srv     *fasthttp.Server
}

// kvroute serve's --worker-first-byte-timeout and --worker-response-timeout
// defaults.
const (
	defaultFirstByte = 10 * time.Second
	defaultResponse  = time.Minute
)

// NewBareProxy returns a BareProxy over workers (http://host:port each).
func NewBareProxy(workers []string) *BareProxy {
	b := &BareProxy{workers: workers, p: proxy.New(proxy.Config{
		FirstByteTimeout: defaultFirstByte, ResponseTimeout: defaultResponse})}
	b.srv = &fasthttp.Server{Handler: b.handle, NoDefaultServerHeader: true}
	return b
}

// Serve serves ln until Close.
func (b *BareProxy) Serve(ln net.Listener) error { return b.srv.Serve(ln) }

// Close stops serving.
func (b *BareProxy) Close() error { return b.srv.Shutdown() }

func (b *BareProxy) handle(ctx *fasthttp.RequestCtx) {
	w := b.workers[b.next.Add(1)%uint64(len(b.workers))]
	url := w + string(ctx.Path())
	u, err := b.p.Send(url, ctx.PostBody(), false)
	if err != nil {
		proxy.WriteError(ctx, fasthttp.StatusBadGateway, err.Error())
		return
	}
	b.p.Relay(ctx, u, proxy.Hooks{})
}
