package eppcheck

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
)

// Gateway plays Envoy in front of an EPP: for each HTTP request it asks
// the EPP over ext_proc (as Start does), forwards the body the EPP streamed
// back to the first endpoint that accepts a connection (the picked one,
// then the fallbacks), and relays the answer through the response path,
// chunk by chunk (SSE streams stay streams). An immediate response is
// relayed as is. Goroutine-safe.
type Gateway struct {
	c      extprocv3.ExternalProcessorClient
	client *http.Client
	// MaxBody bounds a request body read from the client. Default 64 MiB.
	MaxBody int64
}

// NewGateway returns a Gateway asking the EPP on conn.
func NewGateway(conn *grpc.ClientConn) *Gateway {
	return &Gateway{
		c:       extprocv3.NewExternalProcessorClient(conn),
		client:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, ResponseHeaderTimeout: 5 * time.Minute}},
		MaxBody: 64 << 20,
	}
}

// Hop-by-hop and framing headers the gateway sets itself.
var skipHeaders = map[string]bool{"connection": true, "content-length": true, "transfer-encoding": true, "keep-alive": true, "host": true}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, g.MaxBody+1))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	hs := map[string]string{}
	for k, v := range r.Header {
		if !skipHeaders[strings.ToLower(k)] && len(v) > 0 {
			hs[k] = v[0]
		}
	}
	x, p, err := Start(r.Context(), g.c, &Request{Method: r.Method, Path: r.URL.RequestURI(), Headers: hs, Body: body})
	if err != nil {
		// Envoy's ext_proc filter fails closed: 500 when the EPP is unreachable.
		http.Error(w, "ext_proc: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer x.Close()
	if im := p.Immediate; im != nil {
		for _, h := range im.GetHeaders().GetSetHeaders() {
			v := string(h.GetHeader().GetRawValue())
			if v == "" {
				v = h.GetHeader().GetValue()
			}
			w.Header().Set(h.GetHeader().GetKey(), v)
		}
		w.WriteHeader(int(im.GetStatus().GetCode()))
		_, _ = w.Write(im.GetBody())
		return
	}
	resp, served, err := g.forward(r, p, hs)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		if !skipHeaders[strings.ToLower(k)] {
			w.Header()[k] = v
		}
	}
	w.Header().Set("x-gateway-destination-endpoint-served", served)
	if err := x.ResponseHeaders(resp.StatusCode, served, false); err != nil {
		http.Error(w, "ext_proc: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		eos := rerr != nil
		if n > 0 || eos {
			out, err := x.ResponseChunk(buf[:n], eos)
			if err != nil {
				return
			}
			_, _ = w.Write(out)
			if fl != nil {
				fl.Flush()
			}
		}
		if eos {
			return
		}
	}
}

// forward sends the request to the first picked endpoint that takes a
// connection, with the headers the EPP set.
func (g *Gateway) forward(r *http.Request, p *Picked, hs map[string]string) (*http.Response, string, error) {
	var errs []error
	for _, ep := range p.Endpoints() {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+ep+r.URL.RequestURI(), strings.NewReader(string(p.Body)))
		if err != nil {
			return nil, "", err
		}
		for k, v := range hs {
			req.Header.Set(k, v)
		}
		for k, v := range p.Headers {
			req.Header.Set(k, v)
		}
		req.ContentLength = int64(len(p.Body))
		resp, err := g.client.Do(req)
		if err == nil {
			return resp, ep, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", ep, err))
	}
	return nil, "", fmt.Errorf("no picked endpoint answered: %w", errors.Join(errs...))
}
