package eppcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The protocol's names (the Gateway API Inference Extension's Endpoint
// Picker Protocol).
const (
	HeaderDestination = "x-gateway-destination-endpoint"
	MetadataNamespace = "envoy.lb"
	MetadataServed    = "x-gateway-destination-endpoint-served"
	SubsetNamespace   = "envoy.lb.subset_hint"
	MetadataSubset    = "x-gateway-destination-endpoint-subset"
	// MaxChunk is the largest body chunk an EPP may stream back.
	MaxChunk = 62000
	// EnvoyChunk is the size of the body chunks sent, as Envoy forwards a
	// client's body (its default buffer is 16 KiB... 64 KiB per read).
	EnvoyChunk = 16 << 10
)

// Request is one HTTP request as Envoy's ext_proc filter presents it.
type Request struct {
	Method, Path string
	Headers      map[string]string
	Body         []byte
	// Subset, when not nil, is sent as the subset hint metadata.
	Subset []string
	// Chunk is the body chunk size; default EnvoyChunk.
	Chunk int
}

// Picked is what the EPP answered to a request's headers and body.
type Picked struct {
	// Immediate is set when the EPP answered the request itself.
	Immediate *extprocv3.ImmediateResponse
	// Header is the destination header set, Metadata the value under
	// envoy.lb (both "" when absent); Headers every header set.
	Header, Metadata string
	Headers          map[string]string
	ClearRouteCache  bool
	// Body is the body streamed back; Chunks the sizes of its chunks;
	// EOS whether the last had end of stream.
	Body   []byte
	Chunks []int
	EOS    bool
}

// Endpoints splits the destination header.
func (p *Picked) Endpoints() []string {
	if p.Header == "" {
		return nil
	}
	return strings.Split(p.Header, ",")
}

// Exchange is one stream, played as Envoy plays it: the request headers
// (with the subset hint as metadata), the body in chunks with end of
// stream on the last, sent while the answers are read; then the headers
// answer, the body streamed back (FULL_DUPLEX_STREAMED). The stream stays
// open for the response path (Respond) and must be closed with Close.
type Exchange struct {
	Stream extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
}

// Start opens a stream and sends the request.
func Start(ctx context.Context, c extprocv3.ExternalProcessorClient, r *Request) (*Exchange, *Picked, error) {
	ctx, cancel := context.WithCancel(ctx)
	st, err := c.Process(ctx)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	x := &Exchange{Stream: st, cancel: cancel}
	sendErr := make(chan error, 1)
	go func() { sendErr <- sendRequest(st, r) }()
	p, err := readPicked(st, len(r.Body) == 0)
	if err == nil {
		if e := <-sendErr; e != nil && p.Immediate == nil {
			err = e
		}
	}
	if err != nil {
		x.Close()
		return nil, nil, err
	}
	return x, p, nil
}

func sendRequest(st extprocv3.ExternalProcessor_ProcessClient, r *Request) error {
	method := r.Method
	if method == "" {
		method = "POST"
	}
	hs := []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte(method)},
		{Key: ":path", RawValue: []byte(r.Path)},
		{Key: ":authority", RawValue: []byte("gateway")},
		{Key: ":scheme", RawValue: []byte("http")},
	}
	if len(r.Body) > 0 {
		hs = append(hs, &corev3.HeaderValue{Key: "content-type", RawValue: []byte("application/json")},
			&corev3.HeaderValue{Key: "content-length", RawValue: fmt.Appendf(nil, "%d", len(r.Body))})
	}
	for k, v := range r.Headers {
		hs = append(hs, &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(v)})
	}
	req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}, EndOfStream: len(r.Body) == 0}}}
	if r.Subset != nil {
		vals := make([]*structpb.Value, len(r.Subset))
		for i, e := range r.Subset {
			vals[i] = structpb.NewStringValue(e)
		}
		req.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			SubsetNamespace: {Fields: map[string]*structpb.Value{MetadataSubset: structpb.NewListValue(&structpb.ListValue{Values: vals})}},
		}}
	}
	if err := st.Send(req); err != nil {
		return err
	}
	chunk := r.Chunk
	if chunk <= 0 {
		chunk = EnvoyChunk
	}
	for off := 0; off < len(r.Body); {
		n := min(chunk, len(r.Body)-off)
		eos := off+n == len(r.Body)
		if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: r.Body[off : off+n], EndOfStream: eos}}}); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// readPicked reads the headers answer and the body streamed back.
func readPicked(st extprocv3.ExternalProcessor_ProcessClient, bodyless bool) (*Picked, error) {
	p := &Picked{Headers: map[string]string{}}
	gotHeaders := false
	for {
		resp, err := st.Recv()
		if err != nil {
			return nil, fmt.Errorf("stream ended before the EPP answered: %w", err)
		}
		switch r := resp.Response.(type) {
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			p.Immediate = r.ImmediateResponse
			return p, nil
		case *extprocv3.ProcessingResponse_RequestHeaders:
			if gotHeaders {
				return nil, errors.New("two answers to the request headers")
			}
			gotHeaders = true
			cr := r.RequestHeaders.GetResponse()
			p.ClearRouteCache = cr.GetClearRouteCache()
			for _, h := range cr.GetHeaderMutation().GetSetHeaders() {
				v := string(h.GetHeader().GetRawValue())
				if v == "" {
					v = h.GetHeader().GetValue()
				}
				p.Headers[h.GetHeader().GetKey()] = v
			}
			p.Header = p.Headers[HeaderDestination]
			p.Metadata = resp.GetDynamicMetadata().GetFields()[MetadataNamespace].GetStructValue().GetFields()[HeaderDestination].GetStringValue()
			if bodyless {
				return p, nil
			}
		case *extprocv3.ProcessingResponse_RequestBody:
			if !gotHeaders {
				return nil, errors.New("a body answer before the headers answer")
			}
			sr := r.RequestBody.GetResponse().GetBodyMutation().GetStreamedResponse()
			if sr == nil {
				return nil, errors.New("a body answer without streamed_response (FULL_DUPLEX_STREAMED needs the body streamed back)")
			}
			p.Body = append(p.Body, sr.GetBody()...)
			p.Chunks = append(p.Chunks, len(sr.GetBody()))
			if sr.GetEndOfStream() {
				p.EOS = true
				return p, nil
			}
		default:
			return nil, fmt.Errorf("unexpected answer %T before the request was answered", resp.Response)
		}
	}
}

// Respond plays the response path: the response headers (with served, if
// not "", as envoy.lb metadata), then the body in chunks, end of stream on
// the last; it returns the body streamed back.
func (x *Exchange) Respond(status int, served string, chunks [][]byte) ([]byte, error) {
	if err := x.ResponseHeaders(status, served, len(chunks) == 0); err != nil {
		return nil, err
	}
	var out []byte
	for i, c := range chunks {
		b, err := x.ResponseChunk(c, i == len(chunks)-1)
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}

// ResponseHeaders sends the response headers and reads their answer.
func (x *Exchange) ResponseHeaders(status int, served string, eos bool) error {
	req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":status", RawValue: fmt.Appendf(nil, "%d", status)},
		}}, EndOfStream: eos}}}
	if served != "" {
		req.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			MetadataNamespace: {Fields: map[string]*structpb.Value{MetadataServed: structpb.NewStringValue(served)}},
		}}
	}
	if err := x.Stream.Send(req); err != nil {
		return err
	}
	resp, err := x.Stream.Recv()
	if err != nil {
		return err
	}
	if resp.GetResponseHeaders() == nil {
		return fmt.Errorf("answer to the response headers is %T", resp.Response)
	}
	return nil
}

// ResponseChunk sends one response body chunk and returns what the EPP
// streams back for it (the chunk itself when it lets it pass unchanged).
func (x *Exchange) ResponseChunk(c []byte, eos bool) ([]byte, error) {
	if err := x.Stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: c, EndOfStream: eos}}}); err != nil {
		return nil, err
	}
	resp, err := x.Stream.Recv()
	if err != nil {
		return nil, err
	}
	rb := resp.GetResponseBody()
	if rb == nil {
		return nil, fmt.Errorf("answer to a response body chunk is %T", resp.Response)
	}
	if sr := rb.GetResponse().GetBodyMutation().GetStreamedResponse(); sr != nil {
		return sr.GetBody(), nil
	}
	return c, nil // STREAMED: the body passes unchanged
}

// Close ends the stream as Envoy does when the request is over (or
// cancelled).
func (x *Exchange) Close() {
	_ = x.Stream.CloseSend()
	x.cancel()
}

// drain reads the stream to its end (after CloseSend) and reports how it
// ended.
func drain(st extprocv3.ExternalProcessor_ProcessClient) error {
	for {
		if _, err := st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
