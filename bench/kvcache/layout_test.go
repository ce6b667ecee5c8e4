package kvcache

import (
	"reflect"
	"testing"
	"unsafe"
)

// TestBlockLayout: the block array is pointer-free (the GC never scans the
// cache however large) and 40 bytes per block.
func TestBlockLayout(t *testing.T) {
	for _, v := range []any{block{}, plan{}, span{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			switch typ.Field(i).Type.Kind() {
			case reflect.Pointer, reflect.Slice, reflect.Map, reflect.String, reflect.Interface, reflect.Func, reflect.Chan:
				t.Errorf("%v.%s holds a pointer", typ, typ.Field(i).Name)
			}
		}
	}
	if s := unsafe.Sizeof(block{}); s != 40 {
		t.Errorf("block is %d bytes, want 40", s)
	}
}
