package tokenizer

import (
	"os"
	"runtime"
	"syscall"
	"testing"
)

// BenchmarkEncode: a 32 KiB English prompt (testdata/english32k.txt: a
// frozen copy of technical English prose from this repository's docs) with
// each tokenizer; "regexp2" is the same through the generic pre-tokenizer
// (the measurement doc.go cites). The reference's figure on the same text
// comes from testdata/bench.mjs.
func BenchmarkEncode(b *testing.B) {
	text, err := os.ReadFile("testdata/english32k.txt")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name, tok string
		generic   bool
	}{{"qwen3", "qwen3", false}, {"llama3", "llama3", false}, {"deepseek_v3", "deepseek_v3", false}, {"llama2", "llama2", false}, {"gemma3", "gemma3", false}, {"qwen3-regexp2", "qwen3", true}} {
		b.Run(c.name, func(b *testing.B) {
			tk := realTokenizer(b, c.tok)
			tk.generic = c.generic
			defer func() { tk.generic = false }()
			dst := tk.Encode(nil, text)
			runtime.GC() // the garbage of loading the tokenizer is not Encode's
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			cpu0 := cpuTime()
			n := 0
			for b.Loop() {
				dst = tk.Encode(dst[:0], text)
				n++
			}
			// The process's CPU time per op: what one core spends, less
			// inflated than ns/op when other jobs share the machine.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(n), "cpu-ns/op")
			b.ReportMetric(float64(len(dst)), "tokens")
		})
	}
}

// cpuTime is the process's user + system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
