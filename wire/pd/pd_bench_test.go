package pd

import (
	"encoding/json"
	"strings"
	"testing"
)

// benchBodies are chat bodies with a prompt of about the given size.
func benchBodies() map[string][]byte {
	out := map[string][]byte{}
	for _, n := range []int{256, 8 << 10, 64 << 10} {
		msg := strings.Repeat("lorem ipsum ", n/12)
		out[map[int]string{256: "256B", 8 << 10: "8KiB", 64 << 10: "64KiB"}[n]] = []byte(
			`{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"system","content":"be brief"},` +
				`{"role":"user","content":"` + msg + `"}],"stream":true,"stream_options":{"include_usage":true},` +
				`"max_tokens":256,"temperature":0.7}`)
	}
	return out
}

// naivePrefill is the reference proxies' way: decode the body into a map,
// set the members, encode it again.
func naivePrefill(body []byte) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	m["kv_transfer_params"] = map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
		"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
	m["stream"] = false
	m["max_tokens"] = 1
	if _, ok := m["max_completion_tokens"]; ok {
		m["max_completion_tokens"] = 1
	}
	delete(m, "stream_options")
	delete(m, "min_tokens")
	delete(m, "min_completion_tokens")
	return json.Marshal(m)
}

func BenchmarkVLLMPrefill(b *testing.B) {
	for name, body := range benchBodies() {
		b.Run("scan/"+name, func(b *testing.B) {
			dst := make([]byte, 0, len(body)+512)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				dst, _ = AppendVLLMPrefill(dst[:0], body)
			}
		})
		b.Run("naive/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = naivePrefill(body)
			}
		})
	}
}

func BenchmarkVLLMDecode(b *testing.B) {
	for name, body := range benchBodies() {
		b.Run(name, func(b *testing.B) {
			dst := make([]byte, 0, len(body)+512)
			answer := []byte(completionAnswer)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				p, _ := TransferParams(answer)
				dst, _ = AppendVLLMDecode(dst[:0], body, p)
			}
		})
	}
}

func BenchmarkSGLang(b *testing.B) {
	bs := Bootstrap{Host: "10.0.0.7", Port: 8998, Room: 1 << 40}
	for name, body := range benchBodies() {
		b.Run(name, func(b *testing.B) {
			dst := make([]byte, 0, len(body)+512)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				dst, _ = AppendSGLang(dst[:0], body, bs)
			}
		})
	}
}
