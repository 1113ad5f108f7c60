package qp

import (
	"reflect"
	"testing"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/transport"
)

// sameLayout reports where a and b differ in what a pointer conversion
// between them relies on: field names, offsets, sizes and types, where the
// only types allowed to differ are structs (and slices and pointers of
// them) that have the same layout themselves.
func sameLayout(a, b reflect.Type, path string) []string {
	if a == b {
		return nil
	}
	if a.Kind() != b.Kind() || a.Size() != b.Size() || a.Align() != b.Align() {
		return []string{path + ": " + a.String() + " vs " + b.String()}
	}
	switch a.Kind() {
	case reflect.Slice, reflect.Pointer, reflect.Array:
		if a.Kind() == reflect.Array && a.Len() != b.Len() {
			return []string{path + ": array lengths differ"}
		}
		return sameLayout(a.Elem(), b.Elem(), path+"[]")
	case reflect.Struct:
		if a.NumField() != b.NumField() {
			return []string{path + ": field counts differ"}
		}
		var diffs []string
		for i := range a.NumField() {
			fa, fb := a.Field(i), b.Field(i)
			if fa.Name != fb.Name || fa.Offset != fb.Offset {
				diffs = append(diffs, path+": field "+fa.Name+" vs "+fb.Name)
				continue
			}
			diffs = append(diffs, sameLayout(fa.Type, fb.Type, path+"."+fa.Name)...)
		}
		return diffs
	}
	return []string{path + ": " + a.String() + " vs " + b.String()}
}

// TestEngineLayout: the public request and completion types are the
// engine's field for field, so posting converts a pointer and completing
// converts a struct (types.go).
func TestEngineLayout(t *testing.T) {
	for _, c := range [][2]reflect.Type{
		{reflect.TypeFor[SendWR](), reflect.TypeFor[transport.SendWR]()},
		{reflect.TypeFor[RecvWR](), reflect.TypeFor[transport.RecvWR]()},
		{reflect.TypeFor[SGE](), reflect.TypeFor[transport.SGE]()},
		{reflect.TypeFor[WC](), reflect.TypeFor[transport.WC]()},
		{reflect.TypeFor[MR](), reflect.TypeFor[memreg.MR]()},
		{reflect.TypeFor[Attr](), reflect.TypeFor[transport.Attr]()},
		{reflect.TypeFor[AV](), reflect.TypeFor[transport.AV]()},
		{reflect.TypeFor[Caps](), reflect.TypeFor[transport.Caps]()},
	} {
		a, b := c[0], c[1]
		for _, d := range sameLayout(a, b, a.String()) {
			t.Error(d)
		}
	}
	type swapped struct {
		Addr   uint64
		LKey   uint32
		Length uint32
	}
	if sameLayout(reflect.TypeFor[[]SGE](), reflect.TypeFor[[]swapped](), "") == nil {
		t.Error("sameLayout misses two fields in another order")
	}
}

// TestEngineForms: a post reads the caller's request in place.
func TestEngineForms(t *testing.T) {
	sgl := []SGE{{Addr: 1, Length: 2, LKey: 3}, {Addr: 4, Length: 5, LKey: 6}}
	wr := SendWR{WRID: 7, Opcode: WRRDMARead, Flags: SendSignaled, SGL: sgl, RemoteAddr: 8, RKey: 9, AtomicData: [8]byte{10}}
	e := wr.engine()
	if e.WRID != 7 || e.Opcode != transport.WRRDMARead || len(e.SGL) != 2 || e.SGL[1] != (transport.SGE{Addr: 4, Length: 5, LKey: 6}) ||
		e.RemoteAddr != 8 || e.RKey != 9 || e.AtomicData[0] != 10 {
		t.Fatalf("engine form %+v of %+v", *e, wr)
	}
	a := Attr{State: StateRTR, AV: AV{SGIDIndex: 1, DMAC: [6]byte{2}}, RQPSN: 12, QKey: 13}
	if e := a.engine(); e.State != transport.StateRTR || e.AV.SGIDIndex != 1 || e.AV.DMAC[0] != 2 || e.RQPSN != 12 || e.QKey != 13 {
		t.Fatalf("engine form %+v of %+v", *e, a)
	}
	if b := attrOf(*a.engine()); b != a {
		t.Fatalf("attrOf(engine form) = %+v, want %+v", b, a)
	}
	rwr := RecvWR{WRID: 11, SGL: sgl[:1]}
	if r := rwr.engine(); r.WRID != 11 || len(r.SGL) != 1 || r.SGL[0].LKey != 3 {
		t.Fatalf("engine form %+v of %+v", *r, rwr)
	}
}
