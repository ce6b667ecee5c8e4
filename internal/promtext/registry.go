package promtext

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
)

// Type is a metric family's type, as written on its # TYPE line.
type Type string

// The family types of the text format.
const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Histogram Type = "histogram" // samples name_bucket{le}, name_sum, name_count
	Summary   Type = "summary"   // samples name{quantile}, name_sum, name_count
	Untyped   Type = "untyped"
)

// Family describes one metric family.
type Family struct {
	Name string
	Type Type
	// Help is the # HELP text: one line, no backslash.
	Help string
	// Alias is the name a library writes the family under when it differs
	// from Name (Name fixes it to pass promtool's lint, e.g.
	// VictoriaMetrics' counter go_cgo_calls_count is exposed as
	// go_cgo_calls_total). Write rewrites it; empty means none.
	Alias string
}

// UnregisteredHelp is the HELP text Write gives a family it has no Family
// for; Check reports it.
const UnregisteredHelp = "UNREGISTERED: no promtext.Family declares this metric"

// Registry is a set of families and the writer that exposes them.
// Goroutine-safe; built once by NewRegistry (the zero value holds no family).
type Registry struct {
	fams []Family
	idx  map[string]int32 // Name and Alias → index into fams
	pool sync.Pool        // *scratch
}

// NewRegistry combines lists of families. It panics on a duplicate name or
// alias, an invalid name or type, or a missing or multi-line HELP text: the
// lists are static declarations, so that is a programming error found by any
// test that builds the registry.
func NewRegistry(lists ...[]Family) *Registry {
	r := &Registry{idx: map[string]int32{}}
	for _, l := range lists {
		for _, f := range l {
			if err := f.validate(); err != nil {
				panic("promtext: " + err.Error())
			}
			for _, n := range []string{f.Name, f.Alias} {
				if n == "" {
					continue
				}
				if _, dup := r.idx[n]; dup {
					panic("promtext: family " + n + " declared twice")
				}
				r.idx[n] = int32(len(r.fams))
			}
			r.fams = append(r.fams, f)
		}
	}
	return r
}

func (f *Family) validate() error {
	if !validName(f.Name) || (f.Alias != "" && !validName(f.Alias)) {
		return fmt.Errorf("invalid metric name %q (alias %q)", f.Name, f.Alias)
	}
	switch f.Type {
	case Counter, Gauge, Histogram, Summary, Untyped:
	default:
		return fmt.Errorf("family %s: invalid type %q", f.Name, f.Type)
	}
	if strings.TrimSpace(f.Help) == "" || strings.ContainsAny(f.Help, "\\\n") {
		return fmt.Errorf("family %s: HELP text must be one non-empty line without backslashes, got %q", f.Name, f.Help)
	}
	return nil
}

func validName(n string) bool {
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// Families returns the registered families in declaration order. The slice
// is the registry's own: do not modify it.
func (r *Registry) Families() []Family { return r.fams }

// Lookup returns the family a sample name belongs to: a family's Name or
// Alias, or for histograms and summaries that name plus _bucket (histograms
// only), _sum or _count.
func (r *Registry) Lookup(sample string) (Family, bool) {
	i, _ := r.lookup([]byte(sample))
	if i < 0 {
		return Family{}, false
	}
	return r.fams[i], true
}

// lookup returns the family index of a sample name, or -1, and the length
// of the name's prefix that is the family's Alias (0 when not an alias).
func (r *Registry) lookup(name []byte) (int32, int) {
	if i, ok := r.idx[string(name)]; ok {
		return i, aliasLen(&r.fams[i], name)
	}
	for _, suf := range [...]string{"_bucket", "_sum", "_count"} {
		if !bytes.HasSuffix(name, []byte(suf)) {
			continue
		}
		base := name[:len(name)-len(suf)]
		i, ok := r.idx[string(base)]
		if !ok {
			return -1, 0
		}
		if t := r.fams[i].Type; t == Histogram || (t == Summary && suf != "_bucket") {
			return i, aliasLen(&r.fams[i], base)
		}
		return -1, 0
	}
	return -1, 0
}

func aliasLen(f *Family, base []byte) int {
	if f.Alias != "" && string(base) == f.Alias {
		return len(f.Alias)
	}
	return 0
}

// line is one sample line of the scratch buffer.
type line struct {
	start, end int32 // [start, end) in scratch.in, without the newline
	fam        int32 // family slot (see scratch.slots)
	alias      int32 // length of the name prefix to replace by the family's Name
}

// scratch holds one Write's buffers; pooled so a scrape reuses them.
type scratch struct {
	in, out bytes.Buffer
	lines   []line
	counts  []int32 // per slot: lines, then the running start offset
	order   []int32 // slots in order of first appearance
	sorted  []int32 // line indexes grouped by slot
	unknown map[string]int32
	names   []string // unknown slot - len(fams) → sample name
}

// Write runs the writers into a buffer, then writes their samples to w
// grouped by family, in order of each family's first sample, each family
// preceded by its # HELP and # TYPE lines. Comment lines the writers wrote
// (VictoriaMetrics' own metadata, if ExposeMetadata was turned on) are
// dropped. A sample of no registered family gets UnregisteredHelp and type
// counter when its name ends in _total, else untyped. w gets one Write call.
func (r *Registry) Write(w io.Writer, writers ...func(io.Writer)) {
	s, _ := r.pool.Get().(*scratch)
	if s == nil {
		s = &scratch{}
	}
	s.in.Reset()
	for _, f := range writers {
		f(&s.in)
	}
	r.group(s)
	s.out.Reset()
	r.emit(s)
	w.Write(s.out.Bytes()) //nolint:errcheck // a failed scrape is the scraper's problem
	if s.in.Cap() <= 4<<20 {
		r.pool.Put(s)
	}
}

// group fills s.lines, s.order and s.sorted.
func (r *Registry) group(s *scratch) {
	b := s.in.Bytes()
	s.lines = s.lines[:0]
	s.order = s.order[:0]
	s.names = s.names[:0]
	clear(s.unknown)
	s.counts = slices.Grow(s.counts[:0], len(r.fams))[:len(r.fams)]
	clear(s.counts)
	for pos := 0; pos < len(b); {
		end := bytes.IndexByte(b[pos:], '\n')
		if end < 0 {
			end = len(b)
		} else {
			end += pos
		}
		l := b[pos:end]
		start := pos
		pos = end + 1
		if len(bytes.TrimSpace(l)) == 0 || l[0] == '#' {
			continue
		}
		n := bytes.IndexAny(l, "{ \t")
		if n < 0 {
			n = len(l)
		}
		slot, alias := r.lookup(l[:n])
		if slot < 0 {
			slot = s.unknownSlot(len(r.fams), l[:n])
		}
		if s.counts[slot] == 0 {
			s.order = append(s.order, slot)
		}
		s.counts[slot]++
		s.lines = append(s.lines, line{start: int32(start), end: int32(end), fam: slot, alias: int32(alias)})
	}
	// Counting sort by slot, stable: offsets in first-appearance order.
	off := int32(0)
	for _, slot := range s.order {
		c := s.counts[slot]
		s.counts[slot] = off
		off += c
	}
	s.sorted = slices.Grow(s.sorted[:0], len(s.lines))[:len(s.lines)]
	for i := range s.lines {
		slot := s.lines[i].fam
		s.sorted[s.counts[slot]] = int32(i)
		s.counts[slot]++
	}
}

func (s *scratch) unknownSlot(known int, name []byte) int32 {
	if s.unknown == nil {
		s.unknown = map[string]int32{}
	}
	if i, ok := s.unknown[string(name)]; ok {
		return i
	}
	i := int32(known + len(s.names))
	s.unknown[string(name)] = i
	s.names = append(s.names, string(name))
	s.counts = append(s.counts, 0)
	return i
}

// emit writes the grouped samples with their metadata to s.out.
func (r *Registry) emit(s *scratch) {
	b := s.in.Bytes()
	next := 0
	for _, slot := range s.order {
		var name, help string
		var typ Type
		if int(slot) < len(r.fams) {
			f := &r.fams[slot]
			name, help, typ = f.Name, f.Help, f.Type
		} else {
			name, help, typ = s.names[int(slot)-len(r.fams)], UnregisteredHelp, Untyped
			if strings.HasSuffix(name, "_total") {
				typ = Counter
			}
		}
		s.out.WriteString("# HELP ")
		s.out.WriteString(name)
		s.out.WriteByte(' ')
		s.out.WriteString(help)
		s.out.WriteString("\n# TYPE ")
		s.out.WriteString(name)
		s.out.WriteByte(' ')
		s.out.WriteString(string(typ))
		s.out.WriteByte('\n')
		for ; next < len(s.sorted) && s.lines[s.sorted[next]].fam == slot; next++ {
			l := &s.lines[s.sorted[next]]
			start := l.start
			if l.alias > 0 {
				s.out.WriteString(name)
				start += l.alias
			}
			s.out.Write(b[start:l.end])
			s.out.WriteByte('\n')
		}
	}
}
