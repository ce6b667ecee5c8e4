package chattmpl

import (
	"testing"

	"github.com/valyala/fastjson"
)

// BenchmarkRender renders a typical 6-turn conversation (system, then
// user/assistant turns, generation prompt) with each real template, from
// the request body's parsed JSON: message normalization plus the render,
// what the router does per chat request.
func BenchmarkRender(b *testing.B) {
	_, bodies := loadCorpus(b)
	body := fastjson.MustParseBytes(bodies["six_turns"])
	for _, name := range parityTemplates {
		b.Run(name, func(b *testing.B) {
			tmpl, err := Load(needConfig(b, name))
			if err != nil {
				b.Fatal(err)
			}
			dst, err := tmpl.RenderRequest(nil, body)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(dst)))
			b.ReportAllocs()
			for b.Loop() {
				dst, err = tmpl.RenderRequest(dst[:0], body)
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
