package tracestream

import (
	"reflect"
	"testing"
	"unsafe"
)

// TestOpLayout: ops are pointer-free and 56 bytes.
func TestOpLayout(t *testing.T) {
	typ := reflect.TypeOf(Op{})
	for i := range typ.NumField() {
		switch typ.Field(i).Type.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.String, reflect.Interface, reflect.Func, reflect.Chan:
			t.Errorf("Op.%s holds a pointer", typ.Field(i).Name)
		}
	}
	if s := unsafe.Sizeof(Op{}); s != 56 {
		t.Errorf("Op is %d bytes, want 56", s)
	}
}
