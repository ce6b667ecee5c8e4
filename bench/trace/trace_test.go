package trace

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	smallPath = "testdata/mooncake_head200.jsonl"
	fullPath  = "../traces/mooncake_synthetic_trace.jsonl" // shipped in the repository (bench/traces)
)

func loadSmall(t testing.TB) *Trace {
	t.Helper()
	tr, err := ReadFile(smallPath)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestStatsSmall checks the statistics of the committed 200-line head of the
// FAST'25 synthetic trace against values computed independently (Python, see
// the commit that added the file).
func TestStatsSmall(t *testing.T) {
	tr := loadSmall(t)
	s := tr.Stats()
	want := Stats{
		Requests:     200,
		Span:         58501 * time.Millisecond,
		InputTokens:  2663480,
		InputMean:    2663480.0 / 200,
		InputP50:     s.InputP50, // checked below against a sort
		InputMax:     82831,
		OutputTokens: s.OutputTokens,
		BlockRefs:    5330,
		UniqueBlocks: 5007,
		HitRefs:      323,
		HitTokens:    164803,
	}
	if s != want {
		t.Fatalf("stats\n got %+v\nwant %+v", s, want)
	}
	lens := make([]int, 0, len(tr.Requests))
	var out int64
	for _, r := range tr.Requests {
		lens = append(lens, r.InputLength)
		out += int64(r.OutputLength)
	}
	slices.Sort(lens)
	if s.InputP50 != lens[99] || s.OutputTokens != out || out == 0 {
		t.Fatalf("p50 %d (want %d), output %d (want %d)", s.InputP50, lens[99], s.OutputTokens, out)
	}
	if r := tr.Requests[0]; r.Line != 1 || !r.HasTime || r.Time != 0 || r.InputLength != 40160 ||
		r.OutputLength != 6 || len(r.HashIDs) != 79 || r.HashIDs[78] != 78 {
		t.Fatalf("first request %+v", r)
	}
}

// TestShippedTrace: the trace shipped in bench/traces is the published
// file, byte for byte, with the digest its README states.
func TestShippedTrace(t *testing.T) {
	data, err := os.ReadFile(fullPath)
	if err != nil {
		t.Fatalf("the shipped trace: %v", err)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(data))
	readme, err := os.ReadFile("../traces/README.md")
	if err != nil {
		t.Fatal(err)
	}
	const want = "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131"
	if sum != want || len(data) != 1136313 {
		t.Fatalf("sha256 %s, %d bytes; want %s, 1136313 bytes", sum, len(data), want)
	}
	if !strings.Contains(string(readme), want) || !strings.Contains(string(readme), "Apache") {
		t.Fatal("bench/traces/README.md does not state the trace's sha256 and licence")
	}
	if lic, err := os.ReadFile("../traces/LICENSE"); err != nil || !strings.Contains(string(lic), "Apache License") ||
		!strings.Contains(string(lic), "Version 2.0") {
		t.Fatalf("bench/traces/LICENSE: the Apache-2.0 text is missing (%v)", err)
	}
}

// TestStatsFull checks the statistics bench/traces/README.md states for the
// full shipped trace. A missing trace fails it.
func TestStatsFull(t *testing.T) {
	tr, err := ReadFile(fullPath)
	if err != nil {
		t.Fatal(err)
	}
	s := tr.Stats()
	if s.Requests != 3993 || s.UniqueBlocks != 43924 || s.BlockRefs != 121877 ||
		s.InputMax != 191378 || s.InputP50 != 11587 || math.Round(s.InputMean) != 15325 {
		t.Fatalf("stats %+v", s)
	}
	if got := math.Round(s.BlockHitRatio() * 1000); got != 640 {
		t.Fatalf("block hit ratio %.4f, want 64.0%%", s.BlockHitRatio())
	}
	if got := math.Round(s.TokenHitRatio() * 1000); got != 651 {
		t.Fatalf("token hit ratio %.4f, want 65.1%%", s.TokenHitRatio())
	}
	if got := math.Round(s.Span.Minutes()*10) / 10; got != 17.0 {
		t.Fatalf("span %v, want 17.0 min", s.Span)
	}
}

func TestParseErrors(t *testing.T) {
	good := `{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}`
	cases := []struct {
		name, input string
		line        int
		msg         string
	}{
		{"not json", good + "\nhello\n", 2, "not a JSON object"},
		{"truncated", good + "\n" + good + "\n" + good[:30] + "\n", 3, "unexpected end"},
		{"missing input", `{"hash_ids": [1]}`, 1, "missing input_length"},
		{"zero input", `{"input_length": 0, "hash_ids": []}`, 1, "input_length 0 out of range"},
		{"negative output", `{"input_length": 1, "output_length": -1, "hash_ids": [1]}`, 1, "output_length -1"},
		{"missing ids", `{"input_length": 5}`, 1, "missing hash_ids"},
		{"too few ids", "\n\n" + `{"input_length": 513, "hash_ids": [1]}`, 3, "1 hash_ids for input_length 513 (want ceil(513/512) = 2)"},
		{"too many ids", `{"input_length": 512, "hash_ids": [1, 2]}`, 1, "2 hash_ids for input_length 512"},
		{"negative id", `{"input_length": 5, "hash_ids": [-1]}`, 1, "cannot unmarshal"},
		{"float id", `{"input_length": 5, "hash_ids": [1.5]}`, 1, "cannot unmarshal"},
		{"string length", `{"input_length": "5", "hash_ids": [1]}`, 1, "cannot unmarshal"},
		{"negative time", `{"timestamp": -1, "input_length": 5, "hash_ids": [1]}`, 1, "timestamp -1"},
		{"huge time", `{"timestamp": 1e300, "input_length": 5, "hash_ids": [1]}`, 1, "timestamp 1e+300"},
		{"bad session", `{"input_length": 5, "hash_ids": [1], "session_id": [1]}`, 1, "session_id must be"},
		{"negative delay", `{"input_length": 5, "hash_ids": [1], "delay": -3}`, 1, "delay -3"},
		{"trailing", `{"input_length": 5, "hash_ids": [1]} x`, 1, "invalid character"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(c.input))
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v, want a *ParseError", err)
			}
			if pe.Line != c.line || !strings.Contains(pe.Msg, c.msg) {
				t.Fatalf("error %q (line %d), want line %d containing %q", err, pe.Line, c.line, c.msg)
			}
			if !strings.HasPrefix(err.Error(), "trace: line ") {
				t.Fatalf("error %q lacks the line prefix", err)
			}
		})
	}
}

func TestParseOptionalFields(t *testing.T) {
	in := `
{"created_time": 12.5, "input_tokens": 1025, "output_tokens": 7, "hash_ids": [3, 4, 5], "session_id": "s-1", "delay": 250.25, "extra": {"x": 1}}
{"input_length": 1, "hash_ids": [9], "session_id": 42, "delay_ms": 3}
{"timestamp": 0.000001, "input_length": 2, "hash_ids": [9], "session_id": null}
`
	tr, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{
		{Time: 12500 * time.Microsecond, HasTime: true, InputLength: 1025, OutputLength: 7,
			HashIDs: []uint64{3, 4, 5}, Session: "s-1", Delay: 250250 * time.Microsecond, Line: 2},
		{InputLength: 1, HashIDs: []uint64{9}, Session: "42", Delay: 3 * time.Millisecond, Line: 3},
		{Time: time.Nanosecond, HasTime: true, InputLength: 2, HashIDs: []uint64{9}, Line: 4},
	}
	if len(tr.Requests) != len(want) {
		t.Fatalf("%d requests", len(tr.Requests))
	}
	for i := range want {
		if !equalRequest(tr.Requests[i], want[i]) {
			t.Errorf("request %d\n got %+v\nwant %+v", i, tr.Requests[i], want[i])
		}
	}
}

func equalRequest(a, b Request) bool {
	return a.Time == b.Time && a.HasTime == b.HasTime && a.InputLength == b.InputLength &&
		a.OutputLength == b.OutputLength && slices.Equal(a.HashIDs, b.HashIDs) &&
		a.Session == b.Session && a.Delay == b.Delay && a.Line == b.Line
}

func TestAppendJSONRoundTrip(t *testing.T) {
	reqs := []Request{
		{Time: 1500 * time.Microsecond, HasTime: true, InputLength: 1000, OutputLength: 3, HashIDs: []uint64{1, math.MaxUint64}},
		{InputLength: 1, HashIDs: []uint64{0}, Session: "a \"quoted\" id", Delay: 7 * time.Nanosecond},
	}
	var buf []byte
	for i := range reqs {
		buf = reqs[i].AppendJSON(buf)
		buf = append(buf, '\n')
	}
	tr, err := Parse(strings.NewReader(string(buf)))
	if err != nil {
		t.Fatalf("%v\n%s", err, buf)
	}
	for i := range reqs {
		reqs[i].Line = i + 1
		if !equalRequest(tr.Requests[i], reqs[i]) {
			t.Errorf("request %d\n got %+v\nwant %+v", i, tr.Requests[i], reqs[i])
		}
	}
	// The small trace round-trips byte for byte: it is in canonical form.
	small, err := os.ReadFile(smallPath)
	if err != nil {
		t.Fatal(err)
	}
	buf = buf[:0]
	for _, r := range loadSmall(t).Requests {
		buf = r.AppendJSON(buf)
		buf = append(buf, '\n')
	}
	if string(buf) != string(small) {
		t.Fatal("re-encoded small trace differs from the file")
	}
}

func TestDuplicate(t *testing.T) {
	tr := loadSmall(t)
	const d = 3
	dup, err := tr.Duplicate(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(dup.Requests) != d*len(tr.Requests) {
		t.Fatalf("%d requests", len(dup.Requests))
	}
	stride := tr.MaxID() + 1
	for i, r := range dup.Requests {
		src, k := &tr.Requests[i/d], uint64(i%d)
		if r.Time != src.Time || r.InputLength != src.InputLength || len(r.HashIDs) != len(src.HashIDs) {
			t.Fatalf("copy %d of request %d differs: %+v", k, i/d, r)
		}
		for j, id := range r.HashIDs {
			if id != src.HashIDs[j]+k*stride || id/stride != k {
				t.Fatalf("copy %d id %d = %d", k, j, id)
			}
		}
	}
	s, s1 := dup.Stats(), tr.Stats()
	if s.UniqueBlocks != d*s1.UniqueBlocks || s.BlockRefs != d*s1.BlockRefs ||
		s.HitRefs != d*s1.HitRefs || s.HitTokens != d*s1.HitTokens {
		t.Fatalf("duplicated stats %+v, single %+v", s, s1)
	}
	// The source is untouched.
	if tr.Requests[0].HashIDs[0] != 0 {
		t.Fatal("Duplicate modified its source")
	}
	if _, err := tr.Duplicate(0); err == nil {
		t.Fatal("Duplicate(0) succeeded")
	}
	huge := &Trace{Requests: []Request{{InputLength: 1, HashIDs: []uint64{math.MaxUint64 / 2}}}}
	if _, err := huge.Duplicate(3); !errors.Is(err, ErrOverflow) {
		t.Fatalf("overflowing Duplicate: %v", err)
	}
	if _, err := huge.Duplicate(2); err != nil {
		t.Fatalf("Duplicate(2) of max/2: %v", err)
	}
}

// FuzzParseLine checks that any line either fails with a *ParseError or
// parses to a request that re-encodes and parses back equal.
func FuzzParseLine(f *testing.F) {
	for _, r := range loadSmall(f).Requests[:5] {
		f.Add(r.AppendJSON(nil))
	}
	seeds := []Request{
		{Time: 1234567, HasTime: true, InputLength: 513, OutputLength: 9, HashIDs: []uint64{7, 8}, Session: "s", Delay: 5 * time.Millisecond},
		{InputLength: 1, HashIDs: []uint64{math.MaxUint64}, Session: "\u00e9\x00"},
	}
	for i := range seeds {
		f.Add(seeds[i].AppendJSON(nil))
	}
	f.Add([]byte(`{"input_length": 1, "hash_ids": [1], "session_id": 12}`))
	f.Add([]byte(`{"input_length": 1e2, "hash_ids": [1]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseLine(b, 7)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line != 7 {
				t.Fatalf("error %v is not a line-7 ParseError", err)
			}
			return
		}
		if len(r.HashIDs) != (r.InputLength+IDBlockSize-1)/IDBlockSize {
			t.Fatalf("accepted %d ids for %d tokens", len(r.HashIDs), r.InputLength)
		}
		enc := r.AppendJSON(nil)
		r2, err := ParseLine(enc, 7)
		if err != nil {
			t.Fatalf("re-encoded line %s fails: %v", enc, err)
		}
		if !closeTo(r.Time, r2.Time) || !closeTo(r.Delay, r2.Delay) {
			t.Fatalf("times %v/%v became %v/%v via %s", r.Time, r.Delay, r2.Time, r2.Delay, enc)
		}
		r2.Time, r2.Delay = r.Time, r.Delay
		if !equalRequest(r, r2) {
			t.Fatalf("round trip\n got %+v\nwant %+v\nvia %s", r2, r, enc)
		}
	})
}

// closeTo allows the float64 rounding of fractional ms on huge durations.
func closeTo(a, b time.Duration) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= max(1, a>>40)
}
