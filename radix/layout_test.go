package radix

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/kvroute/kvroute/wire"
)

// TestNoPointers fails if an arena element type gains a pointer: the arenas
// must stay invisible to the GC however large the tree grows.
func TestNoPointers(t *testing.T) {
	for _, v := range []any{node{}, block{}, childEntry{}, engEntry{}, wire.BlockHash(0), wire.EngineHash(0), uint32(0), uint64(0)} {
		typ := reflect.TypeOf(v)
		if p := pointerPath(typ); p != "" {
			t.Errorf("%v holds a pointer at %s", typ, p)
		}
	}
	// The arenas are slices of exactly those element types.
	tr := New()
	for name, typ := range map[string]reflect.Type{
		"nodes": reflect.TypeOf(tr.nodes), "blocks": reflect.TypeOf(tr.blocks.c[0]), "sets": reflect.TypeOf(tr.sets),
		"runs.loc": reflect.TypeOf(tr.runs.loc).Elem(), "runs.ids": reflect.TypeOf(tr.runs.ids).Elem(),
		"children": reflect.TypeOf(tr.children.e), "eng": reflect.TypeOf(engineTable{}.e),
	} {
		if p := pointerPath(typ.Elem()); p != "" {
			t.Errorf("arena %s element %v holds a pointer at %s", name, typ.Elem(), p)
		}
	}
}

func pointerPath(typ reflect.Type) string {
	switch typ.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.String, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return typ.String()
	case reflect.Array:
		return pointerPath(typ.Elem())
	case reflect.Struct:
		for i := range typ.NumField() {
			if p := pointerPath(typ.Field(i).Type); p != "" {
				return typ.Field(i).Name + "." + p
			}
		}
	}
	return ""
}

// TestSizes pins the deliberate element sizes: a node is 40 bytes (a 64-bit
// head and seven 32-bit links/counts plus class and live in the padding), a
// block record 8, an edge 16. A change here changes the bytes per entry
// measured in docs/decisions/0001-arena-tree-of-runs.md.
func TestSizes(t *testing.T) {
	if s := unsafe.Sizeof(node{}); s != 40 {
		t.Errorf("node is %d bytes, want 40", s)
	}
	if s := unsafe.Sizeof(block{}); s != 8 {
		t.Errorf("block is %d bytes, want 8", s)
	}
	if s := unsafe.Sizeof(childEntry{}); s != 16 {
		t.Errorf("childEntry is %d bytes, want 16", s)
	}
	if s := unsafe.Sizeof(engEntry{}); s != 12 {
		t.Errorf("engEntry is %d bytes, want 12 (an engine hash in two halves and a block id)", s)
	}
}
