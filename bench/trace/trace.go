package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/kvroute/kvroute/wire/openai"
)

// IDBlockSize is the number of tokens one Mooncake hash id stands for.
const IDBlockSize = 512

// maxLine bounds one JSONL line; the longest line of the FAST'25 traces is
// under 3 KiB, so 64 MiB only guards against a file that is not JSONL.
const maxLine = 64 << 20

// ErrMalformed is wrapped by every *ParseError.
var ErrMalformed = errors.New("malformed trace line")

// ParseError reports a malformed line of a trace file (plain data).
type ParseError struct {
	Line int // 1-based line number in the input
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("trace: line %d: %s", e.Line, e.Msg) }

// Unwrap returns ErrMalformed so callers can test with errors.Is.
func (e *ParseError) Unwrap() error { return ErrMalformed }

// Request is one line of a trace.
//
// HashIDs is a view into the owning Trace's id storage: valid as long as the
// Trace is, and must not be modified.
type Request struct {
	Time         time.Duration // arrival offset ("timestamp", ms); 0 when absent
	HasTime      bool          // the line carried a timestamp
	InputLength  int           // prompt tokens
	OutputLength int           // generated tokens
	HashIDs      []uint64      // ids of the prompt's IDBlockSize-token blocks; len == ceil(InputLength/IDBlockSize)
	Session      string        // "session_id" (a number is kept as its JSON text); "" when absent
	Delay        time.Duration // "delay" (ms) after the previous turn of Session; 0 when absent
	Line         int           // 1-based line number in the source; 0 for synthesized requests
	Tenant       string        // "tenant"; "" when absent (`kvroute replay --tenants` with from_trace)
	Priority     string        // "priority": critical, standard or sheddable; "" when absent
}

// Trace is a parsed request trace in file order.
//
// Not goroutine-safe for mutation; a Trace that is no longer modified may be
// read from many goroutines. The zero value is an empty trace.
type Trace struct {
	Requests []Request
}

// row is the JSON shape of one line. Pointers detect absent fields; the
// aliases are those Dynamo's Mooncake reader accepts.
type row struct {
	Timestamp    *float64        `json:"timestamp"`
	CreatedTime  *float64        `json:"created_time"`
	InputLength  *int64          `json:"input_length"`
	InputTokens  *int64          `json:"input_tokens"`
	OutputLength *int64          `json:"output_length"`
	OutputTokens *int64          `json:"output_tokens"`
	HashIDs      *[]uint64       `json:"hash_ids"`
	SessionID    json.RawMessage `json:"session_id"`
	Delay        *float64        `json:"delay"`
	DelayMs      *float64        `json:"delay_ms"`
	Tenant       *string         `json:"tenant"`
	Priority     *string         `json:"priority"`
}

// ReadFile parses the trace file at path (see Parse).
func ReadFile(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads a JSONL trace. Blank lines are skipped; any other line must be
// a JSON object with input_length > 0 and exactly ceil(input_length/512)
// non-negative integer hash_ids; timestamp, output_length, session_id,
// delay, tenant and priority (critical, standard or sheddable) are optional
// (timestamp and delay may be fractional ms). Unknown
// fields are ignored. The first malformed line stops the parse with a
// *ParseError carrying its line number.
func Parse(r io.Reader) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	t := &Trace{}
	var ids []uint64 // one arena for every request's HashIDs
	type span struct{ off, n int }
	var spans []span
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		req, err := parseLine(b, line)
		if err != nil {
			return nil, err
		}
		spans = append(spans, span{len(ids), len(req.HashIDs)})
		ids = append(ids, req.HashIDs...)
		t.Requests = append(t.Requests, req)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &ParseError{Line: line + 1, Msg: fmt.Sprintf("line longer than %d bytes", maxLine)}
		}
		return nil, fmt.Errorf("trace: line %d: %w", line+1, err)
	}
	for i := range t.Requests {
		s := spans[i]
		t.Requests[i].HashIDs = ids[s.off : s.off+s.n : s.off+s.n]
	}
	return t, nil
}

// ParseLine parses one trace line (see Parse); line is used in errors only.
// The returned HashIDs are freshly allocated.
func ParseLine(b []byte, line int) (Request, error) {
	return parseLine(bytes.TrimSpace(b), line)
}

func parseLine(b []byte, line int) (Request, error) {
	bad := func(format string, args ...any) (Request, error) {
		return Request{}, &ParseError{Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	if len(b) == 0 || b[0] != '{' {
		return bad("not a JSON object")
	}
	var rw row
	if err := json.Unmarshal(b, &rw); err != nil {
		return bad("%v", err)
	}
	req := Request{Line: line}
	ts := first(rw.Timestamp, rw.CreatedTime)
	if ts != nil {
		d, ok := msDuration(*ts)
		if !ok {
			return bad("timestamp %v is not a finite non-negative number of ms", *ts)
		}
		req.Time, req.HasTime = d, true
	}
	in := first(rw.InputLength, rw.InputTokens)
	if in == nil {
		return bad("missing input_length")
	}
	if *in <= 0 || *in > math.MaxInt32 {
		return bad("input_length %d out of range (1..%d)", *in, math.MaxInt32)
	}
	req.InputLength = int(*in)
	if out := first(rw.OutputLength, rw.OutputTokens); out != nil {
		if *out < 0 || *out > math.MaxInt32 {
			return bad("output_length %d out of range (0..%d)", *out, math.MaxInt32)
		}
		req.OutputLength = int(*out)
	}
	if rw.HashIDs == nil {
		return bad("missing hash_ids")
	}
	req.HashIDs = *rw.HashIDs
	if want := (req.InputLength + IDBlockSize - 1) / IDBlockSize; len(req.HashIDs) != want {
		return bad("%d hash_ids for input_length %d (want ceil(%d/%d) = %d)",
			len(req.HashIDs), req.InputLength, req.InputLength, IDBlockSize, want)
	}
	if len(rw.SessionID) > 0 && !bytes.Equal(rw.SessionID, []byte("null")) {
		var s string
		switch {
		case rw.SessionID[0] == '"':
			if err := json.Unmarshal(rw.SessionID, &s); err != nil {
				return bad("session_id: %v", err)
			}
		case rw.SessionID[0] == '-' || (rw.SessionID[0] >= '0' && rw.SessionID[0] <= '9'):
			s = string(rw.SessionID)
		default:
			return bad("session_id must be a string or a number")
		}
		req.Session = s
	}
	if d := first(rw.Delay, rw.DelayMs); d != nil {
		v, ok := msDuration(*d)
		if !ok {
			return bad("delay %v is not a finite non-negative number of ms", *d)
		}
		req.Delay = v
	}
	if rw.Tenant != nil {
		req.Tenant = *rw.Tenant
	}
	if rw.Priority != nil {
		switch p := *rw.Priority; p {
		case "critical", "standard", "sheddable", "":
			req.Priority = p
		default:
			return bad("priority %q is not critical, standard or sheddable", p)
		}
	}
	return req, nil
}

func first[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// msDuration converts fractional milliseconds to a Duration, rejecting NaN,
// negatives and values beyond ~292 years.
func msDuration(ms float64) (time.Duration, bool) {
	if math.IsNaN(ms) || ms < 0 || ms*float64(time.Millisecond) >= math.MaxInt64 {
		return 0, false
	}
	return time.Duration(math.Round(ms * float64(time.Millisecond))), true
}

// MaxID returns the largest hash id of the trace (0 for an empty trace).
func (t *Trace) MaxID() uint64 {
	var m uint64
	for i := range t.Requests {
		for _, id := range t.Requests[i].HashIDs {
			m = max(m, id)
		}
	}
	return m
}

// ErrOverflow is returned by Duplicate when the offset hash ids would not fit
// in 64 bits.
var ErrOverflow = errors.New("trace: duplicated hash ids overflow uint64")

// Duplicate returns a trace of d disjoint copies of t: copy k (0-based) has
// every hash id increased by k*(MaxID()+1), so no block of one copy equals a
// block of another, and the same timestamps, lengths and sessions (copy k > 0
// gets session "<session>#k"). Copies are interleaved request by request
// (r0 copy 0, r0 copy 1, ..., r1 copy 0, ...), so a time-ordered trace stays
// time-ordered. d must be >= 1; Duplicate(1) is a deep copy.
func (t *Trace) Duplicate(d int) (*Trace, error) {
	if d < 1 {
		return nil, fmt.Errorf("trace: duplication factor %d < 1", d)
	}
	stride := t.MaxID() + 1
	if stride == 0 || (d > 1 && uint64(d-1) > (math.MaxUint64-stride+1)/stride) {
		return nil, ErrOverflow
	}
	total := 0
	for i := range t.Requests {
		total += len(t.Requests[i].HashIDs)
	}
	ids := make([]uint64, 0, total*d)
	out := &Trace{Requests: make([]Request, 0, len(t.Requests)*d)}
	for i := range t.Requests {
		r := &t.Requests[i]
		for k := range d {
			off := uint64(k) * stride
			start := len(ids)
			for _, id := range r.HashIDs {
				ids = append(ids, id+off)
			}
			c := *r
			c.HashIDs = ids[start:len(ids):len(ids)]
			if k > 0 && r.Session != "" {
				c.Session = fmt.Sprintf("%s#%d", r.Session, k)
			}
			out.Requests = append(out.Requests, c)
		}
	}
	return out, nil
}

// Stats are the summary statistics of a trace (see Trace.Stats); plain data.
type Stats struct {
	Requests     int
	Span         time.Duration // last minus first timestamp
	InputTokens  int64         // sum of input_length
	InputMean    float64       // mean input_length
	InputP50     int           // median input_length (lower median)
	InputMax     int           // largest input_length
	OutputTokens int64         // sum of output_length
	BlockRefs    int           // hash id references (sum of len(hash_ids))
	UniqueBlocks int           // distinct hash ids
	HitRefs      int           // references an infinite prefix cache would serve
	HitTokens    int64         // tokens of those references (a partial last block counts its own tokens)
}

// BlockHitRatio is HitRefs / BlockRefs (0 for an empty trace).
func (s Stats) BlockHitRatio() float64 {
	if s.BlockRefs == 0 {
		return 0
	}
	return float64(s.HitRefs) / float64(s.BlockRefs)
}

// TokenHitRatio is HitTokens / InputTokens (0 for an empty trace).
func (s Stats) TokenHitRatio() float64 {
	if s.InputTokens == 0 {
		return 0
	}
	return float64(s.HitTokens) / float64(s.InputTokens)
}

// Stats computes the trace statistics, replaying requests in slice order into
// one infinite prefix cache: a block reference hits when the id was seen
// before and every earlier block of the same request hit too (a prefix cache
// cannot serve a block after a miss).
func (t *Trace) Stats() Stats {
	var s Stats
	s.Requests = len(t.Requests)
	if s.Requests == 0 {
		return s
	}
	seen := make(map[uint64]struct{})
	lens := make([]int, 0, len(t.Requests))
	lo, hi := t.Requests[0].Time, t.Requests[0].Time
	for i := range t.Requests {
		r := &t.Requests[i]
		lo, hi = min(lo, r.Time), max(hi, r.Time)
		s.InputTokens += int64(r.InputLength)
		s.OutputTokens += int64(r.OutputLength)
		lens = append(lens, r.InputLength)
		prefix := true
		for j, id := range r.HashIDs {
			s.BlockRefs++
			_, ok := seen[id]
			if prefix && ok {
				s.HitRefs++
				s.HitTokens += int64(min(IDBlockSize, r.InputLength-j*IDBlockSize))
			} else {
				prefix = false
			}
			if !ok {
				seen[id] = struct{}{}
			}
		}
	}
	s.UniqueBlocks = len(seen)
	s.Span = hi - lo
	s.InputMean = float64(s.InputTokens) / float64(s.Requests)
	slices.Sort(lens)
	s.InputP50 = lens[(len(lens)-1)/2]
	s.InputMax = lens[len(lens)-1]
	return s
}

// AppendJSON appends r as one trace line (without the newline) to dst, in
// the canonical field names; Parse reads it back to an equal Request (Line
// aside; Time and Delay to within float64 precision of fractional ms).
// session_id is always written as a string, delay only when non-zero, and
// timestamp only when HasTime.
func (r *Request) AppendJSON(dst []byte) []byte {
	dst = append(dst, '{')
	if r.HasTime {
		dst = append(dst, `"timestamp": `...)
		dst = appendMs(dst, r.Time)
		dst = append(dst, ", "...)
	}
	dst = append(dst, `"input_length": `...)
	dst = strconv.AppendInt(dst, int64(r.InputLength), 10)
	dst = append(dst, `, "output_length": `...)
	dst = strconv.AppendInt(dst, int64(r.OutputLength), 10)
	dst = append(dst, `, "hash_ids": [`...)
	for i, id := range r.HashIDs {
		if i > 0 {
			dst = append(dst, ", "...)
		}
		dst = strconv.AppendUint(dst, id, 10)
	}
	dst = append(dst, ']')
	if r.Session != "" {
		dst = append(dst, `, "session_id": `...)
		dst = openai.AppendJSONString(dst, r.Session)
	}
	if r.Delay != 0 {
		dst = append(dst, `, "delay": `...)
		dst = appendMs(dst, r.Delay)
	}
	if r.Tenant != "" {
		dst = append(dst, `, "tenant": `...)
		dst = openai.AppendJSONString(dst, r.Tenant)
	}
	if r.Priority != "" {
		dst = append(dst, `, "priority": `...)
		dst = openai.AppendJSONString(dst, r.Priority)
	}
	return append(dst, '}')
}

// appendMs writes d in ms: an integer when whole, else with up to six
// decimals (ns precision).
func appendMs(dst []byte, d time.Duration) []byte {
	ms, ns := int64(d)/int64(time.Millisecond), int64(d)%int64(time.Millisecond)
	dst = strconv.AppendInt(dst, ms, 10)
	if ns == 0 {
		return dst
	}
	frac := strconv.AppendInt(nil, ns+int64(time.Millisecond), 10)[1:] // 6 digits, zero padded
	for frac[len(frac)-1] == '0' {
		frac = frac[:len(frac)-1]
	}
	dst = append(dst, '.')
	return append(dst, frac...)
}
