package promtext

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// WhereToDeclare says where a family's HELP text goes; Check's message for
// an unregistered family includes it.
const WhereToDeclare = "declare a promtext.Family{Name, Type, Help} for it next to the code that writes it: " +
	"router counters and histograms in routerFamilies (router/metrics.go), the index in shard/metrics.go, " +
	"ingest in ingest/metrics.go, the mock worker in bench/mock/http.go, Go runtime and process in internal/promtext/process.go"

// Check parses a text exposition (format 0.0.4) and returns every problem
// it finds, joined, or nil. It checks what promtool's parser and linter
// check, without promtool:
//   - every sample's family has exactly one # HELP (non-empty, not
//     UnregisteredHelp) and one # TYPE line, both before its samples;
//   - a family's samples are contiguous (no family starts twice);
//   - counters, and only counters, end in _total; only histograms and
//     summaries have names ending in _bucket, _sum or _count;
//   - names and labels are well-formed, values are numbers, no series
//     appears twice;
//   - histograms: per label set, le bounds strictly increasing and ending
//     at +Inf, cumulative counts non-decreasing, _count (when written) equal
//     to the +Inf bucket; summaries have a quantile label.
func Check(exposition []byte) error {
	c := checker{fams: map[string]*famState{}, series: map[string]bool{}, hists: map[string]*histState{}, bad: map[string]bool{}}
	for n, l := range bytes.Split(exposition, []byte("\n")) {
		c.line(n+1, string(l))
	}
	c.finish()
	return errors.Join(c.errs...)
}

type famState struct {
	name           string
	help, typ      int
	t              Type
	samples        int
	ended, checked bool
}

type histState struct {
	family, labels string
	les, counts    []float64
	count          float64
	hasCount       bool
}

type checker struct {
	fams   map[string]*famState
	order  []*famState
	cur    *famState
	series map[string]bool
	hists  map[string]*histState
	horder []*histState
	bad    map[string]bool // sample names already reported as orphans
	errs   []error
}

func (c *checker) errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// enter makes name the current family.
func (c *checker) enter(n int, name string) *famState {
	if c.cur != nil && c.cur.name == name {
		return c.cur
	}
	if c.cur != nil {
		c.cur.ended = true
	}
	f := c.fams[name]
	if f == nil {
		f = &famState{name: name}
		c.fams[name] = f
		c.order = append(c.order, f)
	} else if f.ended {
		c.errorf("line %d: family %s starts again: its samples and metadata are not contiguous", n, name)
		f.ended = false
	}
	c.cur = f
	return f
}

func (c *checker) line(n int, l string) {
	if strings.TrimSpace(l) == "" {
		return
	}
	if l[0] == '#' {
		c.comment(n, l)
		return
	}
	name, labels, rest, err := parseSample(l)
	if err != nil {
		c.errorf("line %d: %v: %q", n, err, l)
		return
	}
	f, suffix := c.familyOf(name)
	if f == nil {
		if !c.bad[name] {
			c.bad[name] = true
			c.errorf("line %d: sample %s has no # HELP and # TYPE right before it (every family needs both, and its samples must be contiguous)", n, name)
		}
		return
	}
	if f.samples == 0 && (f.help != 1 || f.typ != 1) {
		c.errorf("line %d: family %s has %d HELP and %d TYPE lines before its first sample, want one each", n, f.name, f.help, f.typ)
	}
	f.samples++
	fields := strings.Fields(rest)
	if len(fields) < 1 || len(fields) > 2 {
		c.errorf("line %d: want a value and an optional timestamp after the series: %q", n, l)
		return
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		c.errorf("line %d: value %q is not a number", n, fields[0])
		return
	}
	key := name + "{" + canonical(labels, "") + "}"
	if c.series[key] {
		c.errorf("line %d: series %s appears twice", n, key)
	}
	c.series[key] = true
	switch f.t {
	case Histogram:
		c.histSample(n, f, suffix, labels, v)
	case Summary:
		if suffix == "" && !hasLabel(labels, "quantile") {
			c.errorf("line %d: summary sample %s lacks a quantile label", n, name)
		}
	}
}

func (c *checker) comment(n int, l string) {
	f := strings.Fields(l)
	if len(f) < 3 || (f[1] != "HELP" && f[1] != "TYPE") {
		return // a plain comment
	}
	name := f[2]
	if !validName(name) {
		c.errorf("line %d: invalid metric name %q", n, name)
		return
	}
	fam := c.enter(n, name)
	if fam.samples > 0 {
		c.errorf("line %d: # %s of %s after its samples", n, f[1], name)
	}
	if f[1] == "HELP" {
		fam.help++
		text := strings.TrimSpace(strings.SplitN(l, name, 2)[1])
		switch {
		case fam.help > 1:
			c.errorf("line %d: second # HELP line for %s", n, name)
		case text == "":
			c.errorf("line %d: empty HELP text for %s", n, name)
		case text == UnregisteredHelp:
			c.errorf("family %s has no HELP text: %s", name, WhereToDeclare)
		}
		return
	}
	fam.typ++
	if fam.typ > 1 {
		c.errorf("line %d: second # TYPE line for %s", n, name)
		return
	}
	if len(f) != 4 {
		c.errorf("line %d: malformed TYPE line %q", n, l)
		return
	}
	fam.t = Type(f[3])
	switch fam.t {
	case Counter, Gauge, Untyped, Histogram, Summary:
	default:
		c.errorf("line %d: unknown type %q for %s", n, f[3], name)
	}
	total := strings.HasSuffix(name, "_total")
	switch {
	case fam.t == Counter && !total:
		c.errorf("counter %s: counter names must end in _total", name)
	case fam.t != Counter && total:
		c.errorf("%s %s: only counters may end in _total", fam.t, name)
	}
	if fam.t != Histogram && fam.t != Summary {
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if strings.HasSuffix(name, s) {
				c.errorf("%s %s: only histograms and summaries may end in %s", fam.t, name, s)
			}
		}
	}
}

// familyOf returns the current family if name is one of its sample names,
// and the suffix (_bucket, _sum, _count or "").
func (c *checker) familyOf(name string) (*famState, string) {
	f := c.cur
	if f == nil || f.typ == 0 && f.help == 0 {
		return nil, ""
	}
	if name == f.name && f.t != Histogram {
		return f, ""
	}
	if rest, ok := strings.CutPrefix(name, f.name); ok {
		switch {
		case f.t == Histogram && (rest == "_bucket" || rest == "_sum" || rest == "_count"),
			f.t == Summary && (rest == "_sum" || rest == "_count"):
			return f, rest
		}
	}
	return nil, ""
}

func (c *checker) histSample(n int, f *famState, suffix string, labels [][2]string, v float64) {
	key := f.name + "{" + canonical(labels, "le") + "}"
	h := c.hists[key]
	if h == nil {
		h = &histState{family: f.name, labels: canonical(labels, "le")}
		c.hists[key] = h
		c.horder = append(c.horder, h)
	}
	switch suffix {
	case "_bucket":
		le, ok := label(labels, "le")
		if !ok {
			c.errorf("line %d: %s_bucket without an le label", n, f.name)
			return
		}
		ub, err := strconv.ParseFloat(le, 64)
		if err != nil {
			c.errorf("line %d: le=%q is not a number", n, le)
			return
		}
		h.les = append(h.les, ub)
		h.counts = append(h.counts, v)
	case "_count":
		h.count, h.hasCount = v, true
	}
}

func (c *checker) finish() {
	for _, f := range c.order {
		if f.help != 1 || f.typ != 1 {
			c.errorf("family %s has %d HELP and %d TYPE lines, want one each", f.name, f.help, f.typ)
		}
	}
	for _, h := range c.horder {
		where := h.family + "{" + h.labels + "}"
		if len(h.les) == 0 {
			c.errorf("histogram %s has no buckets", where)
			continue
		}
		for i := 1; i < len(h.les); i++ {
			if h.les[i] <= h.les[i-1] {
				c.errorf("histogram %s: le %g after %g: bounds must increase", where, h.les[i], h.les[i-1])
			}
			if h.counts[i] < h.counts[i-1] {
				c.errorf("histogram %s: bucket le=%g counts %g, fewer than le=%g's %g: buckets must be cumulative", where, h.les[i], h.counts[i], h.les[i-1], h.counts[i-1])
			}
		}
		last := len(h.les) - 1
		if !math.IsInf(h.les[last], 1) {
			c.errorf("histogram %s: the last bucket is le=%g, want +Inf", where, h.les[last])
		} else if h.hasCount && h.count != h.counts[last] {
			c.errorf("histogram %s: _count %g differs from the +Inf bucket %g", where, h.count, h.counts[last])
		}
	}
}

// parseSample splits a sample line into its name, labels and the rest
// (value and timestamp).
func parseSample(l string) (name string, labels [][2]string, rest string, err error) {
	i := 0
	for i < len(l) && l[i] != '{' && l[i] != ' ' && l[i] != '\t' {
		i++
	}
	name = l[:i]
	if !validName(name) {
		return "", nil, "", fmt.Errorf("invalid metric name %q", name)
	}
	if i < len(l) && l[i] == '{' {
		i++
		for {
			for i < len(l) && l[i] == ' ' {
				i++
			}
			if i < len(l) && l[i] == '}' {
				i++
				break
			}
			j := i
			for j < len(l) && l[j] != '=' {
				j++
			}
			ln := l[i:j]
			if j+1 >= len(l) || l[j+1] != '"' || !validName(ln) || strings.Contains(ln, ":") {
				return "", nil, "", fmt.Errorf("malformed label %q", l[i:min(j+1, len(l))])
			}
			j += 2
			var v strings.Builder
			for ; j < len(l) && l[j] != '"'; j++ {
				if l[j] == '\\' && j+1 < len(l) {
					j++
					switch l[j] {
					case 'n':
						v.WriteByte('\n')
					case '\\', '"':
						v.WriteByte(l[j])
					default:
						return "", nil, "", fmt.Errorf("bad escape \\%c in label %s", l[j], ln)
					}
					continue
				}
				v.WriteByte(l[j])
			}
			if j >= len(l) {
				return "", nil, "", fmt.Errorf("unterminated value of label %s", ln)
			}
			if hasLabel(labels, ln) {
				return "", nil, "", fmt.Errorf("label %s twice", ln)
			}
			labels = append(labels, [2]string{ln, v.String()})
			i = j + 1
			for i < len(l) && l[i] == ' ' {
				i++
			}
			if i < len(l) && l[i] == ',' {
				i++
				continue
			}
			if i < len(l) && l[i] == '}' {
				i++
				break
			}
			return "", nil, "", errors.New("want , or } after a label")
		}
	}
	if i >= len(l) || (l[i] != ' ' && l[i] != '\t') {
		return "", nil, "", errors.New("want a space before the value")
	}
	return name, labels, l[i:], nil
}

func label(labels [][2]string, name string) (string, bool) {
	for _, p := range labels {
		if p[0] == name {
			return p[1], true
		}
	}
	return "", false
}

func hasLabel(labels [][2]string, name string) bool {
	_, ok := label(labels, name)
	return ok
}

// canonical renders labels sorted by name, without the one named skip.
func canonical(labels [][2]string, skip string) string {
	ls := slices.Clone(labels)
	slices.SortFunc(ls, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	var b strings.Builder
	for _, p := range ls {
		if p[0] == skip {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p[0] + "=" + strconv.Quote(p[1]))
	}
	return b.String()
}
