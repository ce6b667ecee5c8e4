package wire

import (
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// vLLM's offloading connector publishes the CPU copies of GPU blocks
// without their tokens:
//
//   - vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py
//     (vLLM 0.11–0.13, OffloadingConnectorScheduler.take_events):
//     BlockStored(block_hashes=event.block_hashes, parent_block_hash=None,
//     token_ids=[], lora_id=None, block_size=event.block_size,
//     medium=event.medium, lora_name=None), medium "CPU", block_size the
//     offloaded block size (the GPU block size by default), and
//     BlockRemoved(block_hashes, medium);
//   - vllm/distributed/kv_transfer/kv_connector/v1/offloading/events.py
//     (main, OffloadingEventsTracker._placeholder_stored, the payload when
//     self-describing events are off): the same with block_size=0,
//     group_idx, locality and ownership.
//
// The hashes are the GPU blocks' own (announced earlier with tokens), so the
// event means "these blocks are on the CPU too": a ByEngine Stored event.
// Events are kv_events.py's msgspec structs (tag=True, omit_defaults, maps
// since 0.11; array_like before).
func TestVLLMOffloadedBlocks(t *testing.T) {
	const bs = 4
	toks := tokensFrom(1, 3*bs)
	hashes := []EngineHash{21, 22, 23}
	for _, enc := range []VLLMEncoding{{}, {Map: true}} {
		d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs})
		b := decodeOne(t, d, 0, AppendVLLMBatch(nil, &VLLMBatch{Events: []VLLMEvent{
			{Kind: KindStored, BlockHashes: hashes, Tokens: toks, BlockSize: bs, Medium: "GPU"},
			{Kind: KindStored, BlockHashes: hashes, Tokens: []uint32{}, BlockSize: bs, Medium: "CPU"},
			{Kind: KindRemoved, BlockHashes: hashes[1:], Medium: "GPU"},
			{Kind: KindRemoved, BlockHashes: hashes[2:], Medium: "CPU"},
		}}, enc))
		if len(b.Events) != 4 {
			t.Fatalf("map %v: events:\n%s", enc.Map, eventsString(b.Events))
		}
		cpu := b.Events[1]
		if cpu.Kind != KindStored || cpu.Tier != TierHost || !cpu.ByEngine || len(cpu.Blocks) != 3 || cpu.HasParent {
			t.Fatalf("map %v: CPU event %s", enc.Map, eventString(&cpu))
		}
		for i, bl := range cpu.Blocks {
			if bl.Engine != hashes[i] || bl.Local != 0 {
				t.Errorf("map %v: block %d = %+v", enc.Map, i, bl)
			}
		}
		if b.Events[0].ByEngine || b.Events[0].Blocks[0].Local != refHash(toks[:bs], nil, Seed) {
			t.Errorf("map %v: the GPU event changed", enc.Map)
		}
	}

	// main's placeholder, written field by field as msgspec writes the map
	// (omit_defaults drops extra_keys and the spec fields, which are None).
	var p []byte
	p = msgp.AppendMapHeader(p, 2)
	p = msgp.AppendString(p, "ts")
	p = msgp.AppendFloat64(p, 1)
	p = msgp.AppendString(p, "events")
	p = msgp.AppendArrayHeader(p, 1)
	p = msgp.AppendMapHeader(p, 11)
	p = msgp.AppendString(p, "type")
	p = msgp.AppendString(p, "BlockStored")
	p = msgp.AppendString(p, "block_hashes")
	p = msgp.AppendArrayHeader(p, 1)
	p = msgp.AppendUint64(p, 0xfedcba9876543210)
	for _, k := range []string{"parent_block_hash"} {
		p = msgp.AppendString(p, k)
		p = msgp.AppendNil(p)
	}
	p = msgp.AppendString(p, "token_ids")
	p = msgp.AppendArrayHeader(p, 0)
	p = msgp.AppendString(p, "block_size")
	p = msgp.AppendInt(p, 0)
	p = msgp.AppendString(p, "lora_id")
	p = msgp.AppendNil(p)
	p = msgp.AppendString(p, "medium")
	p = msgp.AppendString(p, "CPU")
	p = msgp.AppendString(p, "lora_name")
	p = msgp.AppendNil(p)
	p = msgp.AppendString(p, "group_idx")
	p = msgp.AppendInt(p, 0)
	p = msgp.AppendString(p, "locality")
	p = msgp.AppendNil(p)
	p = msgp.AppendString(p, "ownership")
	p = msgp.AppendNil(p)
	b := decodeOne(t, NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs}), 0, p)
	if len(b.Events) != 1 || !b.Events[0].ByEngine || b.Events[0].Tier != TierHost || b.Events[0].Blocks[0].Engine != 0xfedcba9876543210 {
		t.Fatalf("placeholder: %s", eventsString(b.Events))
	}

	// Still refused: a device copy without tokens, and an offloaded block
	// size that is not a multiple of the engine's.
	for _, ev := range []VLLMEvent{
		{Kind: KindStored, BlockHashes: hashes, Tokens: []uint32{}, BlockSize: bs, Medium: "GPU"},
		{Kind: KindStored, BlockHashes: hashes, Tokens: []uint32{}, BlockSize: bs + 2, Medium: "CPU"},
	} {
		var b Batch
		_ = NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs}).Decode(&b, 0, AppendVLLMBatch(nil, &VLLMBatch{Events: []VLLMEvent{ev}}, VLLMEncoding{}))
		if b.Rejected != 1 || len(b.Events) != 0 {
			t.Errorf("%s %s block size %d: rejected %d, events %d", ev.Medium, ev.Kind, ev.BlockSize, b.Rejected, len(b.Events))
		}
	}
}
