package cpuset

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxCPU bounds the CPU numbers Parse accepts; it matches the size of the
// kernel affinity mask that golang.org/x/sys/unix.CPUSet can hold (1024).
const MaxCPU = 1023

// ErrSyntax is returned (wrapped) for a malformed CPU list.
var ErrSyntax = errors.New("cpuset: bad CPU list")

// Parse parses a CPU list such as "0-3,8" into the sorted, de-duplicated CPU
// numbers it names. Whitespace around items is ignored; the empty string (or
// only whitespace) yields nil, meaning "no CPUs configured". Ranges are
// inclusive and must not be reversed; numbers must be in [0, MaxCPU].
// The returned slice is freshly allocated and owned by the caller.
func Parse(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var cpus []int
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := parseCPU(lo, s)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = parseCPU(hi, s); err != nil {
				return nil, err
			}
			if b < a {
				return nil, fmt.Errorf("%w %q: reversed range %q", ErrSyntax, s, item)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

func parseCPU(s, whole string) (int, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > MaxCPU || s == "" || s[0] == '+' {
		return 0, fmt.Errorf("%w %q: bad CPU number %q", ErrSyntax, whole, s)
	}
	return n, nil
}

// Format returns the canonical CPU-list form of cpus ("0-3,8"): sorted,
// de-duplicated, with runs of consecutive numbers collapsed into ranges.
// It does not modify cpus. Parse(Format(x)) equals the sorted, de-duplicated x.
func Format(cpus []int) string {
	c := slices.Clone(cpus)
	slices.Sort(c)
	c = slices.Compact(c)
	var b strings.Builder
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] == c[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(c[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(c[j]))
		}
		i = j + 1
	}
	return b.String()
}
