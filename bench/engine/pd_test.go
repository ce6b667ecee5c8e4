package engine

import (
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/kvcache"
	"github.com/kvroute/kvroute/wire"
)

// TestDecodeSlowedByCoBatchedPrefill: in an aggregated engine, a decode
// step that shares its batch with prefill tokens takes longer the more
// prefill tokens it carries (the interference disaggregation removes), and
// a decode-only step does not pay for prefill at all.
func TestDecodeSlowedByCoBatchedPrefill(t *testing.T) {
	itl := func(prefill int) time.Duration {
		e := New(Config{Capacity: 4096, BlockSize: 16})
		if err := e.Submit(Request{ID: 1, Prompt: prompt(1, 1, 4, 0), PromptTokens: 64, MaxTokens: 100}, 0); err != nil {
			t.Fatal(err)
		}
		now := e.Step(0) // request 1's prefill
		if prefill > 0 {
			if err := e.Submit(Request{ID: 2, Prompt: prompt(2, 2, prefill/16, 0), PromptTokens: prefill, MaxTokens: 1}, now); err != nil {
				t.Fatal(err)
			}
		}
		d := e.Step(now) // request 1 decodes, beside request 2's prefill
		if got := e.LastStep(); got.DecodeTokens != 1 || got.PrefillTokens != prefill {
			t.Fatalf("step with %d prefill tokens: %+v", prefill, got)
		}
		return d
	}
	alone := itl(0)
	prev := alone
	for _, p := range []int{512, 2048, 4096} {
		d := itl(p)
		if d <= prev {
			t.Errorf("decode step beside %d prefill tokens took %v, not more than %v", p, d, prev)
		}
		prev = d
	}
	// The band of the package doc: beside a 2048-token prefill a
	// decode step of this small batch takes several times its decode-only
	// time.
	if r := float64(itl(2048)) / float64(alone); r < 3 || r > 15 {
		t.Errorf("decode step beside 2048 prefill tokens is %.1f× a decode-only one, want 3× to 15×", r)
	}
}

// TestTransferredPrompt: a decode-side request whose prompt KV arrived from
// a prefill worker prefills only its partial tail, stores (and announces)
// the transferred blocks, and counts them apart from cache hits.
func TestTransferredPrompt(t *testing.T) {
	e := New(Config{Capacity: 256, BlockSize: 16})
	p := prompt(1, 1, 8, 0)
	if err := e.Submit(Request{ID: 1, Prompt: p, PromptTokens: 8*16 + 5, MaxTokens: 2, Transferred: 8*16 + 5}, 0); err != nil {
		t.Fatal(err)
	}
	e.Step(0)
	if got := e.LastStep().PrefillTokens; got != 5 {
		t.Errorf("prefilled %d tokens, want the 5-token tail", got)
	}
	st := e.Stats()
	if st.TransferredTokens != 8*16 || st.CachedTokens != 0 {
		t.Errorf("transferred %d, cached %d; want 128, 0", st.TransferredTokens, st.CachedTokens)
	}
	stored := 0
	for _, ev := range e.Events() {
		if ev.Kind == wire.KindStored {
			stored += len(ev.Blocks)
		}
	}
	if stored != 8 {
		t.Errorf("announced %d stored blocks, want the 8 transferred", stored)
	}
	if err := e.Submit(Request{ID: 2, Prompt: p[:2], PromptTokens: 32, MaxTokens: 1, Transferred: 33}, 0); err == nil {
		t.Error("more transferred tokens than the prompt's accepted")
	}
}

// TestPinHoldsBlocks: a finished request submitted with Pin keeps its
// blocks in use until Unpin; without Pin they are freed at the end.
func TestPinHoldsBlocks(t *testing.T) {
	for _, pin := range []bool{false, true} {
		e := New(Config{Capacity: 64, BlockSize: 16})
		if err := e.Submit(Request{ID: 1, Prompt: prompt(1, 1, 4, 0), PromptTokens: 64, MaxTokens: 1, Pin: pin}, 0); err != nil {
			t.Fatal(err)
		}
		e.Step(0)
		if !e.Idle() {
			t.Fatal("request still running after its one token")
		}
		used, _ := e.KV().Usage()
		if pin != (used > 0) {
			t.Errorf("pin %v: %d blocks in use after the end", pin, used)
		}
		if pin {
			if err := e.Submit(Request{ID: 1, Prompt: prompt(1, 1, 1, 0), PromptTokens: 16, MaxTokens: 1}, 0); err != ErrDuplicate {
				t.Errorf("resubmitting a pinned id: %v, want ErrDuplicate", err)
			}
			if !e.Unpin(1) || e.Unpin(1) {
				t.Error("Unpin: want true once, then false")
			}
			if used, _ := e.KV().Usage(); used != 0 {
				t.Errorf("%d blocks in use after Unpin", used)
			}
			var held []kvcache.HeldBlock
			if held = e.KV().Held(held); len(held) != 4 {
				t.Errorf("%d blocks cached after Unpin, want 4", len(held))
			}
		}
	}
}
