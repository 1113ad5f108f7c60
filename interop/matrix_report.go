//go:build linux

package interop

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Table renders the results as a Markdown table.
func (m *Matrix) Table() string {
	var b strings.Builder
	b.WriteString("| cell | MTU | direction | result | packets | NAKs | retransmissions | time |\n")
	b.WriteString("| --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n")
	for _, r := range m.Results() {
		res := r.Status
		if r.Status != StatusPass && r.Reason != "" {
			res += ": " + oneLine(r.Reason, 110)
		}
		if r.Status == StatusPass && r.Atomics > 0 {
			res += fmt.Sprintf(" (%d atomic values chained)", r.Atomics)
		}
		if r.Status == StatusPass && len(r.Warnings) > 0 {
			res += " (" + oneLine(strings.Join(r.Warnings, "; "), 110) + ")"
		}
		naks := strconv.Itoa(r.NAKs)
		if r.RNRNAKs > 0 {
			naks += fmt.Sprintf(" + %d RNR", r.RNRNAKs)
		}
		pk, rt, tm := strconv.Itoa(r.Packets), strconv.Itoa(r.Retrans), fmt.Sprintf("%.1f s", r.Elapsed.Seconds())
		if len(r.RetransBy) > 0 {
			rt += " (" + byString(r.RetransBy) + ")"
		}
		if r.Status == StatusSkip {
			pk, naks, rt, tm = "–", "–", "–", "–"
		}
		name := r.Cell
		if r.Note != "" {
			name += " (" + r.Note + ")"
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", name, r.MTU, r.Dir, res, pk, naks, rt, tm)
	}
	return b.String()
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "|", "\\|")
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// WireDiffs compares, per cell, the profile of goroce's frames with rxe's
// over both directions (so that each side is seen as requester and as
// responder), and returns Markdown: one row per field that differs in some
// cell, with both values and the cells. Only cells that passed both ways
// count.
func (m *Matrix) WireDiffs() (string, int) {
	type pair struct{ gor, rxe WireProfile }
	byCell := map[string]*pair{}
	passed := map[string]int{}
	var order []string
	for _, r := range m.Results() {
		key := fmt.Sprintf("%s@%d", r.Cell, r.MTU)
		if r.Status != StatusPass || r.Profiles == nil {
			passed[key] -= 10
			continue
		}
		passed[key]++
		p := byCell[key]
		if p == nil {
			p = &pair{WireProfile{}, WireProfile{}}
			byCell[key] = p
			order = append(order, key)
		}
		merge := func(dst, src WireProfile) {
			for k, v := range src {
				if old, ok := dst[k]; ok && old != v {
					dst[k] = mergeValues(old, v)
				} else {
					dst[k] = v
				}
			}
		}
		merge(p.gor, r.Profiles["goroce"])
		merge(p.rxe, r.Profiles["rxe"])
	}
	type row struct {
		gor, rxe map[string]bool
		cells    []string
	}
	rows := map[string]*row{}
	all := map[string]*row{} // every field, values over all compared cells
	compared := 0
	for _, key := range order {
		if passed[key] != 2 {
			continue
		}
		compared++
		p := byCell[key]
		for f, v := range p.rxe {
			if all[f] == nil {
				all[f] = &row{gor: map[string]bool{}, rxe: map[string]bool{}}
			}
			for _, x := range strings.Split(v, ", ") {
				all[f].rxe[x] = true
			}
		}
		for f, v := range p.gor {
			if all[f] == nil {
				all[f] = &row{gor: map[string]bool{}, rxe: map[string]bool{}}
			}
			for _, x := range strings.Split(v, ", ") {
				all[f].gor[x] = true
			}
		}
		for _, f := range ProfileDiff(p.gor, p.rxe) {
			rw := rows[f]
			if rw == nil {
				rw = &row{gor: map[string]bool{}, rxe: map[string]bool{}}
				rows[f] = rw
			}
			rw.gor[p.gor[f]], rw.rxe[p.rxe[f]] = true, true
			rw.cells = append(rw.cells, key)
		}
	}
	if compared == 0 {
		return "No cell passed in both directions, so nothing was compared.\n", 0
	}
	var fields []string
	for f := range rows {
		fields = append(fields, f)
	}
	sort.Strings(fields)
	var b strings.Builder
	id := func(s string) string { return s }
	if len(fields) == 0 {
		fmt.Fprintf(&b, "In all %d cells that passed both ways, every profiled field of goroce's frames matched rxe's.\n", compared)
	} else {
		b.WriteString("| field | rxe | goroce | cells |\n| --- | --- | --- | --- |\n")
		for _, f := range fields {
			rw := rows[f]
			cells := strings.Join(rw.cells, ", ")
			if len(rw.cells) == compared {
				cells = fmt.Sprintf("all %d compared", compared)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", f, oneLine(setString(rw.rxe, id), 200), oneLine(setString(rw.gor, id), 200), cells)
		}
	}
	// Every field with the values seen over all compared cells: what
	// "identical" above stands for.
	var names []string
	for f := range all {
		names = append(names, f)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "\nEvery profiled field, values seen over the %d compared cells (a field only one side shows is one only that side sent in these cells):\n\n", compared)
	b.WriteString("| field | rxe | goroce | |\n| --- | --- | --- | --- |\n")
	for _, f := range names {
		a := all[f]
		rv, gv := setString(a.rxe, id), setString(a.gor, id)
		mark := "same"
		switch {
		case len(a.rxe) == 0 || len(a.gor) == 0:
			mark = "one side only"
		case rows[f] != nil:
			mark = "**differs**"
		case rv != gv:
			mark = "same per cell"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", f, oneLine(rv, 200), oneLine(gv, 200), mark)
	}
	return b.String(), len(fields)
}

func mergeValues(a, b string) string {
	m := map[string]bool{}
	for _, s := range strings.Split(a, ", ") {
		m[s] = true
	}
	for _, s := range strings.Split(b, ", ") {
		m[s] = true
	}
	return setString(m, func(s string) string { return s })
}

// Doc markers in docs/interop.md.
const (
	docMatrixBegin = "<!-- matrix:begin (generated by GOROCE_INTEROP_WRITE_DOC=1 go test ./interop/ -run TestMatrix) -->"
	docMatrixEnd   = "<!-- matrix:end -->"
	docWireBegin   = "<!-- wire:begin (generated) -->"
	docWireEnd     = "<!-- wire:end -->"
)

// WriteDoc replaces the generated sections of the doc at path: the results
// table (with the run's date, mode and time) and the measured wire
// differences.
func (m *Matrix) WriteDoc(path, header string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	wire, _ := m.WireDiffs()
	s, err := replaceBetween(string(b), docMatrixBegin, docMatrixEnd, header+"\n"+m.Table())
	if err != nil {
		return err
	}
	s, err = replaceBetween(s, docWireBegin, docWireEnd, wire)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

func replaceBetween(s, begin, end, body string) (string, error) {
	i := strings.Index(s, begin)
	j := strings.Index(s, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("markers %q … %q not found", begin, end)
	}
	return s[:i+len(begin)] + "\n" + strings.TrimRight(body, "\n") + "\n" + s[j:], nil
}
