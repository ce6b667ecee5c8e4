package epp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvroute/kvroute/router"
)

// The Endpoint Picker Protocol's names.
const (
	// HeaderDestination carries the picked endpoints ("ip:port", the
	// chosen one first, then the fallbacks) to Envoy, as a request header
	// and under MetadataNamespace.
	HeaderDestination = "x-gateway-destination-endpoint"
	// MetadataNamespace is the dynamic-metadata namespace of the picked
	// endpoints and of the served one.
	MetadataNamespace = "envoy.lb"
	// MetadataServed, in MetadataNamespace on the response path, names the
	// endpoint that served the request.
	MetadataServed = "x-gateway-destination-endpoint-served"
	// SubsetNamespace and MetadataSubset carry the endpoints a request is
	// restricted to (a list of "ip:port" strings).
	SubsetNamespace = "envoy.lb.subset_hint"
	MetadataSubset  = "x-gateway-destination-endpoint-subset"
	// HeaderDpRank tells an engine serving several dp ranks behind one
	// address which rank was picked (vLLM and SGLang obey it).
	HeaderDpRank = "x-data-parallel-rank"
	// MaxChunk is the largest body chunk streamed back to Envoy.
	MaxChunk = 62000
)

// Health service names (grpc.health.v1).
const (
	HealthLiveness  = "liveness"
	HealthReadiness = "readiness"
	HealthProcessor = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// Config configures a Server.
type Config struct {
	Router *router.Router
	// Fallbacks is how many endpoints follow the chosen one (--epp-fallbacks).
	Fallbacks int
	// MaxBodyBytes bounds a request body (--max-body-bytes); a longer one
	// is answered 413.
	MaxBodyBytes int
	// Ready reports why the EPP cannot take requests yet (nil: it can);
	// default Router.Routable.
	Ready func() error
	// HealthInterval is how often readiness is re-evaluated. Default 1 s.
	HealthInterval time.Duration
	Logger         *slog.Logger
}

// Server is the endpoint picker: an envoy.service.ext_proc.v3
// ExternalProcessor over a router.Router, and the grpc.health.v1 services.
// Goroutine-safe; build it with New, register it with Register, stop its
// health loop with Close.
//
// A stream reuses its response messages (the headers answer, the body
// chunks) from one Send to the next, so that the steady path allocates
// nothing of its own: register it on a grpc.Server without stats handlers
// or tracing that keep sent messages past Send (grpc-go's SendMsg
// contract), as `kvroute epp` builds it.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	cfg    Config
	health *health.Server
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	rr     atomic.Uint64 // bodyless requests' endpoint

	// Counters, read by Stats.
	streams, picked, immediate, moved, cancelled atomic.Uint64

	states sync.Pool // *stream
}

// New builds a Server and starts its health loop.
func New(cfg Config) (*Server, error) {
	if cfg.Router == nil {
		return nil, errors.New("epp: Config.Router is nil")
	}
	if cfg.Fallbacks < 0 {
		return nil, errors.New("--epp-fallbacks must be >= 0")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 16 << 20
	}
	if cfg.Ready == nil {
		cfg.Ready = cfg.Router.Routable
	}
	if cfg.HealthInterval <= 0 {
		cfg.HealthInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, health: health.NewServer(), stop: make(chan struct{}), done: make(chan struct{})}
	s.states.New = func() any { return newStream() }
	s.health.SetServingStatus(HealthLiveness, healthpb.HealthCheckResponse_SERVING)
	s.checkReady()
	go s.healthLoop()
	return s, nil
}

// Stats are a Server's counters since New.
type Stats struct {
	// Streams opened; requests Picked (routed, booked or not) or answered
	// Immediately; bookings Moved to the pod that served; streams that
	// ended (Cancelled) while their request was still booked, before the
	// response's end.
	Streams, Picked, Immediate, Moved, Cancelled uint64
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	return Stats{Streams: s.streams.Load(), Picked: s.picked.Load(), Immediate: s.immediate.Load(),
		Moved: s.moved.Load(), Cancelled: s.cancelled.Load()}
}

// Register registers the ExternalProcessor and health services on g.
func (s *Server) Register(g *grpc.Server) {
	extprocv3.RegisterExternalProcessorServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
}

// Close stops the health loop and marks every service NOT_SERVING.
// Idempotent.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		s.health.Shutdown()
	})
}

func (s *Server) healthLoop() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.checkReady()
		}
	}
}

func (s *Server) checkReady() {
	st := healthpb.HealthCheckResponse_SERVING
	if err := s.cfg.Ready(); err != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus(HealthReadiness, st)
	s.health.SetServingStatus(HealthProcessor, st)
	s.health.SetServingStatus("", st)
}

// stream is one ext_proc stream's state, pooled. Its response messages
// are reused: Send marshals before it returns.
type stream struct {
	pick   router.Pick
	in     router.PickRequest
	body   []byte
	subset []string
	hint   bool // the request named a subset (maybe empty)
	path   string
	dest   []byte

	// The headers answer, reused: hdrSet[0] is the destination, hdrSet[1]
	// the dp rank; mdDest the metadata value.
	hdrResp *extprocv3.ProcessingResponse
	hdrMut  *extprocv3.HeaderMutation
	hdrSet  []*corev3.HeaderValueOption
	mdDest  *structpb.Value_StringValue
	rankBuf []byte
	pathBuf []byte

	bodyResp  *extprocv3.ProcessingResponse
	bodyChunk *extprocv3.StreamedBodyResponse
	respBody  *extprocv3.ProcessingResponse
	respChunk *extprocv3.StreamedBodyResponse
}

func newStream() *stream {
	st := &stream{}
	st.hdrSet = []*corev3.HeaderValueOption{
		{Header: &corev3.HeaderValue{Key: HeaderDestination}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
		{Header: &corev3.HeaderValue{Key: HeaderDpRank}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
	}
	st.hdrMut = &extprocv3.HeaderMutation{}
	st.mdDest = &structpb.Value_StringValue{}
	st.hdrResp = &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{HeaderMutation: st.hdrMut, ClearRouteCache: true},
		}},
		DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			MetadataNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				HeaderDestination: {Kind: st.mdDest},
			}}),
		}},
	}
	st.bodyChunk = &extprocv3.StreamedBodyResponse{}
	st.bodyResp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
			Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: st.bodyChunk}}}}}}
	st.respChunk = &extprocv3.StreamedBodyResponse{}
	st.respBody = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
			Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: st.respChunk}}}}}}
	return st
}

func (st *stream) reset() {
	st.in = router.PickRequest{}
	st.body = st.body[:0]
	st.subset = st.subset[:0]
	st.hint = false
	st.path = ""
	st.dest = st.dest[:0]
	st.mdDest.StringValue = ""
	st.hdrSet[0].Header.RawValue, st.hdrSet[1].Header.RawValue = nil, nil
	st.bodyChunk.Body, st.respChunk.Body = nil, nil
}

var (
	respHeadersOK = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}}}}
	respBodyOK = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}}
	reqTrailersOK = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{}}}
	respTrailersOK = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{}}}
)

// Process serves one HTTP request's ext_proc stream (see the package doc
// for the message sequence).
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	s.streams.Add(1)
	st := s.states.Get().(*stream)
	defer func() {
		if st.pick.Booked() {
			s.cfg.Router.PickDone(&st.pick)
		}
		st.reset()
		s.states.Put(st)
	}()
	var (
		decided    bool // the request headers were answered
		bodyEnded  bool
		firstResp  = true
		respStream = true // echo response bodies (FULL_DUPLEX_STREAMED)
	)
	for {
		req, err := srv.Recv()
		if err != nil {
			if st.pick.Booked() {
				s.cancelled.Add(1)
			}
			if errors.Is(err, context.Canceled) || isEOF(err) {
				return nil
			}
			return err
		}
		if pc := req.GetProtocolConfig(); pc != nil && pc.GetResponseBodyMode() != filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
			respStream = false
		}
		switch r := req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			st.pathBuf = appendHeader(st.pathBuf[:0], r.RequestHeaders.GetHeaders(), ":path")
			st.path = unsafe.String(unsafe.SliceData(st.pathBuf), len(st.pathBuf)) // valid until the stream's reset
			if r.RequestHeaders.GetEndOfStream() && isModels(st.path, headerValue(r.RequestHeaders.GetHeaders(), ":method")) {
				// The fleet's models, as serve answers: no pod has the union.
				s.immediate.Add(1)
				return srv.Send(immediate(200, s.cfg.Router.AppendModels(nil), 0))
			}
			st.subset, st.hint = subsetOf(st.subset[:0], req.GetMetadataContext())
			if r.RequestHeaders.GetEndOfStream() {
				// No body (GET /v1/models): any routable endpoint, nothing booked.
				if err := s.bodyless(srv, st); err != nil {
					return err
				}
				decided = true
			}
		case *extprocv3.ProcessingRequest_RequestBody:
			if decided {
				continue // a body after the answer: nothing more to do
			}
			b := r.RequestBody.GetBody()
			if len(st.body)+len(b) > s.cfg.MaxBodyBytes {
				s.immediate.Add(1)
				return srv.Send(immediate(413, router.PickErrorBody(413, "request_too_large", "request body larger than "+
					strconv.Itoa(s.cfg.MaxBodyBytes)+" bytes (--max-body-bytes)"), 0))
			}
			st.body = append(st.body, b...)
			if !r.RequestBody.GetEndOfStream() {
				continue
			}
			bodyEnded = true
			decided = true
			if done, err := s.decide(srv, st, true); done || err != nil {
				return err
			}
		case *extprocv3.ProcessingRequest_RequestTrailers:
			if !decided && !bodyEnded {
				// The body ended with trailers: decide now.
				decided = true
				if done, err := s.decide(srv, st, false); done || err != nil {
					return err
				}
			}
			if err := srv.Send(reqTrailersOK); err != nil {
				return err
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			if served := servedOf(req.GetMetadataContext()); served != "" && st.pick.Booked() {
				if s.cfg.Router.PickServed(&st.pick, served) {
					s.moved.Add(1)
				}
			}
			if err := srv.Send(respHeadersOK); err != nil {
				return err
			}
			if r.ResponseHeaders.GetEndOfStream() {
				s.cfg.Router.PickDone(&st.pick)
			}
		case *extprocv3.ProcessingRequest_ResponseBody:
			if firstResp {
				firstResp = false
				s.cfg.Router.PickPrefillDone(&st.pick)
			}
			eos := r.ResponseBody.GetEndOfStream()
			if respStream {
				st.respChunk.Body, st.respChunk.EndOfStream = r.ResponseBody.GetBody(), eos
				err = srv.Send(st.respBody)
				st.respChunk.Body = nil
			} else {
				err = srv.Send(respBodyOK)
			}
			if err != nil {
				return err
			}
			if eos {
				s.cfg.Router.PickDone(&st.pick)
			}
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			s.cfg.Router.PickDone(&st.pick)
			if err := srv.Send(respTrailersOK); err != nil {
				return err
			}
		}
	}
}

// decide places the buffered body and answers: the request headers with
// the picked endpoints, then the body streamed back (eos: the body's last
// chunk had end of stream), or an immediate response (done).
func (s *Server) decide(srv extprocv3.ExternalProcessor_ProcessServer, st *stream, eos bool) (done bool, err error) {
	st.in.Body = st.body
	st.in.Chat = strings.Contains(st.path, "/chat/completions")
	st.in.Subset = nil
	if st.hint {
		st.in.Subset = hinted(st.subset) // an empty subset is a 503
	}
	st.in.Fallbacks = s.cfg.Fallbacks
	if err := s.cfg.Router.Pick(&st.pick, &st.in); err != nil {
		var pe *router.PickError
		if !errors.As(err, &pe) {
			pe = &router.PickError{Status: 500, Body: router.PickErrorBody(500, "", err.Error())}
		}
		s.immediate.Add(1)
		return true, srv.Send(immediate(pe.Status, pe.Body, pe.RetryAfter))
	}
	s.picked.Add(1)
	st.dest = st.dest[:0]
	for i, e := range st.pick.Endpoints {
		if i > 0 {
			st.dest = append(st.dest, ',')
		}
		st.dest = append(st.dest, e...)
	}
	if err := srv.Send(st.headers(st.pick.MultiRank, st.pick.Worker.Dp)); err != nil {
		return true, err
	}
	for off := 0; ; {
		n := min(MaxChunk, len(st.body)-off)
		st.bodyChunk.Body = st.body[off : off+n]
		off += n
		st.bodyChunk.EndOfStream = eos && off == len(st.body)
		if err := srv.Send(st.bodyResp); err != nil {
			return true, err
		}
		if off == len(st.body) {
			break
		}
	}
	st.bodyChunk.Body = nil
	return false, nil
}

// isModels reports whether a request is GET /v1/models (query ignored).
func isModels(path, method string) bool {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return method == "GET" && (path == "/v1/models" || path == "/v1/models/")
}

// bodyless answers a request without a body with a routable endpoint (in
// turn) and nothing booked.
func (s *Server) bodyless(srv extprocv3.ExternalProcessor_ProcessServer, st *stream) error {
	var subset []string
	if st.hint {
		subset = hinted(st.subset)
	}
	ep := s.cfg.Router.AnyEndpoint(s.rr.Add(1), subset)
	if ep == "" {
		s.immediate.Add(1)
		return srv.Send(immediate(503, router.PickErrorBody(503, "", "no workers: none routable"), 0))
	}
	s.picked.Add(1)
	return srv.Send(headersResponse([]byte(ep), -1))
}

// noEndpoints is an empty subset that is not nil (nil: no subset).
var noEndpoints = []string{}

// hinted returns the subset a request named, never nil.
func hinted(subset []string) []string {
	if len(subset) == 0 {
		return noEndpoints
	}
	return subset[:len(subset):len(subset)]
}

// headers fills the stream's headers answer for st.dest (and the dp rank
// when multiRank). Its metadata value aliases st.dest: the message is
// marshaled by Send, before st.dest changes (see Server).
func (st *stream) headers(multiRank bool, rank uint32) *extprocv3.ProcessingResponse {
	st.hdrSet[0].Header.RawValue = st.dest
	st.hdrMut.SetHeaders = st.hdrSet[:1]
	if multiRank {
		st.rankBuf = strconv.AppendUint(st.rankBuf[:0], uint64(rank), 10)
		st.hdrSet[1].Header.RawValue = st.rankBuf
		st.hdrMut.SetHeaders = st.hdrSet[:2]
	}
	st.mdDest.StringValue = unsafe.String(unsafe.SliceData(st.dest), len(st.dest))
	return st.hdrResp
}

// headersResponse answers the request headers: the destination header and
// metadata, the dp rank when the worker serves several (rank >= 0), and a
// route-cache clear so that Envoy routes on them.
func headersResponse(dest []byte, rank int) *extprocv3.ProcessingResponse {
	set := []*corev3.HeaderValueOption{{
		Header:       &corev3.HeaderValue{Key: HeaderDestination, RawValue: dest},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}}
	if rank >= 0 {
		set = append(set, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: HeaderDpRank, RawValue: strconv.AppendInt(nil, int64(rank), 10)},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	md := &structpb.Struct{Fields: map[string]*structpb.Value{
		MetadataNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			HeaderDestination: structpb.NewStringValue(string(dest)),
		}}),
	}}
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{
				HeaderMutation:  &extprocv3.HeaderMutation{SetHeaders: set},
				ClearRouteCache: true,
			},
		}},
		DynamicMetadata: md,
	}
}

// immediate answers the request itself: status, a JSON body and, when
// retryAfter > 0, Retry-After.
func immediate(status int, body []byte, retryAfter int) *extprocv3.ProcessingResponse {
	set := []*corev3.HeaderValueOption{{
		Header:       &corev3.HeaderValue{Key: "content-type", RawValue: []byte("application/json")},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}}
	if retryAfter > 0 {
		set = append(set, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: "retry-after", RawValue: strconv.AppendInt(nil, int64(retryAfter), 10)},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: set},
			Body:    body,
			Details: "kvroute_epp_" + strconv.Itoa(status),
		},
	}}
}

// appendHeader appends a header's value (raw_value, as Envoy sends it, or
// value) to dst.
func appendHeader(dst []byte, h *corev3.HeaderMap, key string) []byte {
	for _, v := range h.GetHeaders() {
		if v.GetKey() == key {
			if raw := v.GetRawValue(); raw != nil {
				return append(dst, raw...)
			}
			return append(dst, v.GetValue()...)
		}
	}
	return dst
}

// headerValue returns a header's value (raw_value, as Envoy sends it, or
// value).
func headerValue(h *corev3.HeaderMap, key string) string {
	for _, v := range h.GetHeaders() {
		if v.GetKey() == key {
			if raw := v.GetRawValue(); raw != nil {
				return string(raw)
			}
			return v.GetValue()
		}
	}
	return ""
}

// subsetOf appends the endpoints of the request's subset hint: a list of
// "ip:port" strings (or one comma-separated string).
func subsetOf(dst []string, md *corev3.Metadata) ([]string, bool) {
	ns := md.GetFilterMetadata()[SubsetNamespace]
	v := ns.GetFields()[MetadataSubset]
	if v == nil {
		return dst, false
	}
	if l := v.GetListValue(); l != nil {
		for _, e := range l.GetValues() {
			dst = appendEndpoints(dst, e.GetStringValue())
		}
		return dst, true
	}
	return appendEndpoints(dst, v.GetStringValue()), true
}

func appendEndpoints(dst []string, s string) []string {
	for e := range strings.SplitSeq(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			dst = append(dst, e)
		}
	}
	return dst
}

// servedOf returns the endpoint that served the request, from the
// response path's metadata, or "".
func servedOf(md *corev3.Metadata) string {
	return md.GetFilterMetadata()[MetadataNamespace].GetFields()[MetadataServed].GetStringValue()
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }
