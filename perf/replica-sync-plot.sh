#!/usr/bin/env bash
# make replica-sync-plot: the offline replica-sync sweep as a figure. It
# writes a bursty trace (Mooncake format) and runs
# `kvroute replay --routers 3 --sync-delays ...` over it: window max/mean
# worker share and hit ratio against the sync delay, against one router
# and the replicas without sync. Deterministic (a simulation).
#
# usage: perf/replica-sync-plot.sh [BIN] [OUT.svg] [TRACE.jsonl]
set -eu
BIN=${1:-bin/kvroute}
PLOT=${2:-docs/replica-sync-delay.svg}
TRACE=${3:-out/replica-sync-bursts.jsonl}
mkdir -p "$(dirname "$TRACE")"
# 60 bursts 2 s apart (each ends before the next); a burst is 8 requests
# (one per worker) 1 ms apart, from 4 prefix families (3 shared 512-token
# blocks each, the same families in every burst) with a unique last block.
awk 'BEGIN {
	id = 1000000
	for (b = 0; b < 60; b++) {
		for (i = 0; i < 8; i++) {
			f = 100 * (i % 4)
			printf "{\"timestamp\": %d, \"input_length\": 2048, \"output_length\": 64, \"hash_ids\": [%d, %d, %d, %d]}\n", 2000 * b + i, f, f + 1, f + 2, id++
		}
	}
}' >"$TRACE"
"$BIN" replay --trace "$TRACE" --compare kv --workers 8 --routers 3 --speedup 1 --progress off \
	--sync-delays 0,100us,250us,500us,1ms,2ms,4ms,8ms,16ms,50ms,200ms --plot "$PLOT" --json "${PLOT%.svg}.json"
