//go:build !race

package pd

import "testing"

// Each leg's body is built without allocating once dst has grown.
func TestAllocs(t *testing.T) {
	params := []byte(`{"remote_engine_id":"e","remote_block_ids":[1,2,3],"remote_host":"h","remote_port":1}`)
	batch := []byte(`{"text":["a","b","c","d"],"bootstrap_room":1}`)
	b := Bootstrap{Host: "10.0.0.7", Port: 8998, Room: 77}
	dst := make([]byte, 0, 4096)
	body, answer := []byte(chatBody), []byte(completionAnswer)
	for name, f := range map[string]func(){
		"AppendVLLMPrefill":  func() { dst, _ = AppendVLLMPrefill(dst[:0], body) },
		"AppendVLLMDecode":   func() { dst, _ = AppendVLLMDecode(dst[:0], body, params) },
		"TransferParams":     func() { _, _ = TransferParams(answer) },
		"AppendSGLang":       func() { dst, _ = AppendSGLang(dst[:0], body, b) },
		"AppendSGLang/batch": func() { dst, _ = AppendSGLang(dst[:0], batch, b) },
		"BatchSize":          func() { _, _ = BatchSize(batch) },
	} {
		f()
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s: %v allocs, want 0", name, a)
		}
	}
}
