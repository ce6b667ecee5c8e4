//go:build !race

package router

import (
	"testing"

	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/openai"
)

// The batcher's per-batch work (lookup, decisions, frees) and the handler's
// hashing allocate nothing once warmed up.
func TestBatcherAllocs(t *testing.T) {
	r, ix := benchRouter(t, 2048)
	defer ix.Close()
	r.closed.Store(true)
	batch := benchBatch(t, r, 2048, 16)
	decideRound(r, batch)
	if a := testing.AllocsPerRun(50, func() { decideRound(r, batch) }); a != 0 {
		t.Errorf("decide round: %v allocs, want 0", a)
	}
	toks := benchTokens(3, 2048)
	p := batch[0]
	req := &openai.Request{Tokens: toks, LoRA: []byte("lora-a")}
	if a := testing.AllocsPerRun(50, func() { r.hash(p, req) }); a != 0 {
		t.Errorf("hash: %v allocs, want 0", a)
	}
	// Salted and multimodal requests too, once the scratch is warm.
	req.Salt, req.MM = []byte("tenant"), []wire.MMRange{{Hash: 7, Offset: 100, Length: 600}}
	r.hash(p, req)
	if a := testing.AllocsPerRun(50, func() { r.hash(p, req) }); a != 0 {
		t.Errorf("hash with salt and mm: %v allocs, want 0", a)
	}
}
