package engine

import "time"

// Perf is a step-time model. Its functions must be pure (an Engine calls
// them from Step); the zero value means DefaultPerf to New. Prefill returns the time to compute tokens
// uncached prompt tokens in one batch; Decode the time of one decode pass
// at KV usage u (used/total blocks, in [0, 1]).
type Perf struct {
	Prefill func(tokens int) time.Duration
	Decode  func(usage float64) time.Duration
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
