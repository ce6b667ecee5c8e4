package engine

import "time"

// Perf is a step-time model. Its functions must be pure (an Engine calls
// them from Step); the zero value means DefaultPerf to New. Prefill returns the time to compute tokens
// uncached prompt tokens in one batch; Decode the time of one decode pass
// at KV usage u (used/total blocks, in [0, 1]).
//
// Shared is the fixed cost of a forward pass that both terms include (their
// intercepts: launch, weight reads): a step that prefills and decodes pays
// it once, Prefill(t) + Decode(u) − Shared. DefaultPerf's is 0 (its two
// terms add up, as the model it copies does); DistServePerf sets it.
type Perf struct {
	Prefill func(tokens int) time.Duration
	Decode  func(usage float64) time.Duration
	Shared  time.Duration
}

// DefaultPerf is the polynomial model of Dynamo's mocker:
//
//	prefill_ms = 4.209989e-07·t² + 1.518344e-02·t + 16.50142   (t uncached batch tokens)
//	decode_ms  = −25.74·u² + 54.01·u + 5.74                    (u = used/total KV blocks)
//
// Both are increasing on their domains (decode's vertex is at u ≈ 1.05).
var DefaultPerf = Perf{Prefill: PrefillPoly, Decode: DecodePoly}

// PrefillPoly is DefaultPerf's prefill model; 0 tokens take 0.
func PrefillPoly(tokens int) time.Duration {
	if tokens <= 0 {
		return 0
	}
	t := float64(tokens)
	return ms(4.209989e-07*t*t + 1.518344e-02*t + 16.50142)
}

// DecodePoly is DefaultPerf's decode model; u is clamped to [0, 1].
func DecodePoly(u float64) time.Duration {
	u = min(max(u, 0), 1)
	return ms(-25.74*u*u + 54.01*u + 5.74)
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// KVBytesPerToken is the KV cache size of one token that host-tier onload
// times assume: Llama-3-8B in bf16 (32 layers × 8 KV heads × 128 dims × K
// and V × 2 bytes = 128 KiB), the model class DefaultPerf's polynomials were
// fitted on.
const KVBytesPerToken = 128 << 10

// DefaultHostGBps is the default host-to-device bandwidth for onloads, in
// GB/s: PCIe 5.0 x16's 64 GB/s halved for what offload stacks reach.
const DefaultHostGBps = 32

// HostBlockTime is the time to copy one block of blockSize tokens from
// host memory at gbps GB/s (Config.HostBlockTime).
func HostBlockTime(blockSize int, gbps float64) time.Duration {
	if gbps <= 0 {
		return 0
	}
	return time.Duration(float64(blockSize*KVBytesPerToken) / (gbps * 1e9) * float64(time.Second))
}

// DistServe's profiled step model of OPT-13B on one A100-80GB (TP 1), the
// fit its simulator uses to reproduce the paper's figures (Zhong et al.,
// "DistServe: Disaggregating Prefill and Decoding for Goodput-optimized
// Large Language Model Serving", OSDI'24, arXiv:2401.09670; coefficients
// from LLMServe/DistServe simdistserve/estimators/profile_data/
// profiler-a100-80g.distserve.json, "facebook/opt-13b", "1"):
//
//	prefill_ms = 16.456860 + 0.092647506·t + 6.4747857e-06·t²   (t prompt tokens)
//	decode_ms  = 19.934703 + 0.00062693565·c + 0.038506977·b     (c context tokens, b requests; b < 95)
const (
	DistServePrefillA = 16.456860431694288
	DistServePrefillB = 0.09264750660897617
	DistServePrefillC = 6.474785740229194e-06
	DistServeDecodeA  = 19.934702624895458
	DistServeDecodeC  = 0.0006269356524350583 // per context token
	DistServeDecodeB  = 0.03850697740828398   // per request
)

// DistServeKVTokens is the KV capacity, in tokens, of OPT-13B on one
// A100-80GB: (80 GB − 26 GB of weights) × 0.9 over 800 KiB per token (40
// layers × 5120 × K and V × 2 bytes) ≈ 57,000; DistServePerf's decode term
// at usage u has c = u × kvTokens context tokens.
const DistServeKVTokens = 57344

// DistServePerf returns DistServe's profiled OPT-13B/A100 step model (see
// the constants) for an engine of kvTokens KV tokens: Prefill(t) is its
// prefill fit; Decode(u) its decode fit at c = u·kvTokens context tokens
// with the per-request term left out (at most 3.7 ms below its 95-request
// threshold; the engine's model sees usage, not the batch size); Shared is
// the prefill intercept, the per-pass cost both fits include, so a mixed
// step costs Decode(u) + Prefill(t) − 16.46 ms. The prefill's t² term
// squares the batch's tokens (DistServe sums each prompt's square), which
// overstates a batch of several prompts by at most 6.5e-6·t² ms.
func DistServePerf(kvTokens int) Perf {
	kv := float64(kvTokens)
	return Perf{
		Prefill: func(tokens int) time.Duration {
			if tokens <= 0 {
				return 0
			}
			t := float64(tokens)
			return ms(DistServePrefillA + DistServePrefillB*t + DistServePrefillC*t*t)
		},
		Decode: func(u float64) time.Duration {
			u = min(max(u, 0), 1)
			return ms(DistServeDecodeA + DistServeDecodeC*u*kv)
		},
		Shared: ms(DistServePrefillA),
	}
}
