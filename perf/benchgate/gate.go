package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"strconv"
	"strings"
)

// Regression is one benchmark metric that got worse.
type Regression struct {
	Name, Unit string
	Old, New   float64
	P          float64
}

func (r Regression) String() string {
	change := "from 0"
	if r.Old != 0 {
		change = fmt.Sprintf("%+.1f%%", (r.New/r.Old-1)*100)
	}
	return fmt.Sprintf("%s %s: %g -> %g (%s, p=%.3f)", r.Name, r.Unit, r.Old, r.New, change, r.P)
}

// direction is +1 if larger is worse for unit, -1 if smaller is worse, 0
// if the unit is not gated.
func direction(unit string) int {
	switch {
	case strings.HasSuffix(unit, "/op"):
		return 1
	case strings.HasSuffix(unit, "/s"):
		return -1
	}
	return 0
}

// Regressions parses benchstat's CSV output (two columns, old and new) and
// returns the metrics worse by more than margin with p < alpha, and how
// many gated metrics had both an old and a new value.
func Regressions(in []byte, margin, alpha float64) (regs []Regression, compared int, err error) {
	// benchstat prints the configuration lines (goos: ...) and blank lines
	// between sections; keep only CSV rows (they contain commas), and
	// drop its trailing notes (cell: message).
	var rows [][]string
	for _, line := range bytes.Split(in, []byte("\n")) {
		if !bytes.Contains(line, []byte(",")) {
			continue
		}
		r := csv.NewReader(bytes.NewReader(line))
		r.FieldsPerRecord = -1
		rec, err := r.Read()
		if err != nil {
			return nil, 0, fmt.Errorf("csv line %q: %w", line, err)
		}
		rows = append(rows, rec)
	}
	unit := ""
	for _, rec := range rows {
		switch {
		case len(rec) < 7:
			continue
		case rec[0] == "" && rec[1] != "" && rec[2] == "CI":
			unit = rec[1] // the unit header: ,sec/op,CI,sec/op,CI,vs base,P
			continue
		case rec[0] == "" || rec[0] == "geomean" || unit == "":
			continue
		}
		dir := direction(unit)
		if dir == 0 || rec[1] == "" || rec[3] == "" {
			continue
		}
		oldV, err1 := strconv.ParseFloat(rec[1], 64)
		newV, err2 := strconv.ParseFloat(rec[3], 64)
		if err1 != nil || err2 != nil {
			return nil, 0, fmt.Errorf("benchmark %s %s: values %q, %q", rec[0], unit, rec[1], rec[3])
		}
		compared++
		p, ok := pValue(rec[6])
		if !ok || p >= alpha {
			continue
		}
		worse := false
		switch {
		case dir > 0 && oldV == 0:
			worse = newV > 0
		case dir > 0:
			worse = newV > oldV*(1+margin)
		default:
			worse = newV < oldV*(1-margin)
		}
		if worse {
			regs = append(regs, Regression{Name: rec[0], Unit: unit, Old: oldV, New: newV, P: p})
		}
	}
	return regs, compared, nil
}

// pValue parses benchstat's "p=0.026 n=6" cell.
func pValue(cell string) (float64, bool) {
	for f := range strings.FieldsSeq(cell) {
		if v, ok := strings.CutPrefix(f, "p="); ok {
			p, err := strconv.ParseFloat(v, 64)
			return p, err == nil
		}
	}
	return 0, false
}
