#!/usr/bin/env bash
# make run-cluster: kvroute's scale-out topology on localhost, each part its
# own process: 3 NATS nodes (kvroute nats, one JetStream cluster), the
# standalone indexer (kvroute indexer, KV events in an R3 stream), 2 router
# replicas (kvroute serve --router-replica-sync --use-remote-indexer) and 4
# simulated workers (kvroute mock). Logs in $OUT/*.log. Ctrl-C stops all.
# Each part is started once its dependencies answer /ready; if a part exits
# before everything is ready, the script names its log, stops the others
# and fails (exit status 1). Needs curl.
#
# usage: perf/run-cluster.sh [BIN] [OUT]
set -u
BIN=${1:-bin/kvroute}
OUT=${2:-out/run-cluster}
HOST=127.0.0.1
# First ports; override from the environment (e.g. NATS_PORT=14222).
NATS_PORT=${NATS_PORT:-4222}     # client ports of the 3 nodes: NATS_PORT..+2
ROUTE_PORT=${ROUTE_PORT:-6222}   # their cluster route ports: ROUTE_PORT..+2
ROUTER_PORT=${ROUTER_PORT:-8000} # routers r1, r2: ROUTER_PORT, +1
INDEXER_PORT=${INDEXER_PORT:-8090}
WORKER_PORT=${WORKER_PORT:-9100} # workers: WORKER_PORT..+3
NATS_PORTS=("$NATS_PORT" $((NATS_PORT + 1)) $((NATS_PORT + 2)))
ROUTE_PORTS=("$ROUTE_PORT" $((ROUTE_PORT + 1)) $((ROUTE_PORT + 2)))
ROUTER_PORTS=("$ROUTER_PORT" $((ROUTER_PORT + 1)))

# How long a part may take to answer /ready (or /health): the indexer and
# the routers wait for the cluster's JetStream leader themselves (kvroute
# --jetstream-wait, 5 minutes by default), answering 503 "starting: ..."
# meanwhile.
READY_WAIT=${READY_WAIT:-330}

rm -rf "$OUT" && mkdir -p "$OUT"
pids=()
names=()

stop() { # exit status (default 0)
	trap - INT TERM
	echo
	echo "stopping: routers, fleet and indexer first, then the NATS nodes"
	# In reverse start order: the NATS nodes go last, so the others leave
	# cleanly (routers drain, the indexer closes its consumer).
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		if kill -0 "${pids[$i]}" 2>/dev/null; then
			kill -TERM "${pids[$i]}" 2>/dev/null
			wait "${pids[$i]}" 2>/dev/null
			echo "  ${names[$i]} (pid ${pids[$i]}) stopped"
		fi
	done
	exit "${1:-0}"
}
trap stop INT TERM

start() { # name, then the command
	local name=$1
	shift
	"$@" >"$OUT/$name.log" 2>&1 &
	pids+=($!)
	names+=("$name")
}

died() { # index of a part that exited: say so, name its log, stop all, fail
	local i=$1
	wait "${pids[$i]}" 2>/dev/null
	local rc=$?
	echo "FAILED: ${names[$i]} (pid ${pids[$i]}) exited with status $rc; its log is $OUT/${names[$i]}.log:" >&2
	tail -20 "$OUT/${names[$i]}.log" >&2
	stop 1
}

check_alive() { # every part started so far is running, or fail
	local i
	for i in "${!pids[@]}"; do
		if ! kill -0 "${pids[$i]}" 2>/dev/null; then
			died "$i"
		fi
	done
}

wait_port() { # name, port
	for _ in $(seq 1 150); do
		if (exec 3<>"/dev/tcp/$HOST/$2") 2>/dev/null; then
			return 0
		fi
		check_alive
		sleep 0.1
	done
	echo "FAILED: $1 is not listening on $HOST:$2 after 15 s; its log is $OUT/$1.log:" >&2
	tail -20 "$OUT/$1.log" >&2
	stop 1
}

wait_ready() { # name, URL: until it answers 200, saying what it waits for
	local name=$1 url=$2 body="" last="" t0=$SECONDS
	while true; do
		check_alive
		body=$(curl -s -m 2 -w ' (HTTP %{http_code})' "$url" 2>/dev/null)
		case $body in
		*"(HTTP 200)") return 0 ;;
		esac
		if [ "$body" != "$last" ] && [ -n "$body" ]; then
			echo "  $name: $body"
			last=$body
		fi
		if ((SECONDS - t0 > READY_WAIT)); then
			echo "FAILED: $name not ready at $url after ${READY_WAIT} s (last answer: ${body:-none}); its log is $OUT/$name.log:" >&2
			tail -20 "$OUT/$name.log" >&2
			stop 1
		fi
		sleep 0.5
	done
}

command -v curl >/dev/null || {
	echo "run-cluster needs curl (to check each part's /ready)" >&2
	exit 1
}

routes=""
urls=""
for i in 0 1 2; do
	routes+="${routes:+,}nats://$HOST:${ROUTE_PORTS[$i]}"
	urls+="${urls:+,}nats://$HOST:${NATS_PORTS[$i]}"
done
for i in 0 1 2; do
	n=n$((i + 1))
	start "nats-$n" "$BIN" nats --name "$n" --port "${NATS_PORTS[$i]}" --cluster-port "${ROUTE_PORTS[$i]}" \
		--routes "$routes" --data-dir "$OUT/nats-$n"
done
for i in 0 1 2; do
	wait_port "nats-n$((i + 1))" "${NATS_PORTS[$i]}"
done

# The indexer creates the R3 stream once the cluster has a JetStream
# leader: it waits for one itself, its /ready answering 503 "starting:
# waiting for JetStream" meanwhile.
echo "waiting for each part's /ready:"
start indexer "$BIN" indexer --nats "$urls" --http-addr "$HOST:$INDEXER_PORT" --events-jetstream --events-replicas 3 --indexer-id indexer-1
wait_port indexer "$INDEXER_PORT"
wait_ready indexer "http://$HOST:$INDEXER_PORT/ready"
echo "  indexer: ready"

for i in 0 1; do
	start "router-r$((i + 1))" "$BIN" serve --nats "$urls" --http-addr "$HOST:${ROUTER_PORTS[$i]}" \
		--router-id "r$((i + 1))" --router-replica-sync --use-remote-indexer
done
for i in 0 1; do
	wait_port "router-r$((i + 1))" "${ROUTER_PORTS[$i]}"
done

start fleet "$BIN" mock --nats "$urls" --workers 4 --port "$WORKER_PORT" -v
wait_port fleet "$WORKER_PORT"
for w in 0 1 2 3; do
	wait_ready "fleet" "http://$HOST:$((WORKER_PORT + w))/health"
done
echo "  fleet: 4 workers answer /health"
# A router is ready once it knows a worker (the fleet's registrations).
for i in 0 1; do
	wait_ready "router-r$((i + 1))" "http://$HOST:${ROUTER_PORTS[$i]}/ready"
	echo "  router-r$((i + 1)): ready"
done

cat <<EOM

kvroute cluster on $HOST (logs in $OUT/):
  NATS nodes   $urls   (pids ${pids[0]} ${pids[1]} ${pids[2]})
  indexer      http://$HOST:$INDEXER_PORT   (GET /workers, /health, /metrics; POST /query)
  router r1    http://$HOST:${ROUTER_PORTS[0]}   (pid ${pids[4]})
  router r2    http://$HOST:${ROUTER_PORTS[1]}   (pid ${pids[5]})
  workers      http://$HOST:$WORKER_PORT .. $((WORKER_PORT + 3))

try:
  curl -s $HOST:${ROUTER_PORTS[0]}/v1/chat/completions -d '{"messages":[{"role":"user","content":"Tell me about KV caches."}],"max_tokens":8}'
  curl -s $HOST:${ROUTER_PORTS[1]}/route -d '{"messages":[{"role":"user","content":"Tell me about KV caches."}]}'
  kill ${pids[0]}    # a NATS node: its clients reconnect to the other two
  kill -9 ${pids[4]}  # router r1: r2 expires its bookings after --router-sync-expiry
Ctrl-C stops everything.
EOM
while true; do # a part that exits (or is killed by hand) is reported
	sleep 1 &
	wait $!
	for i in "${!pids[@]}"; do
		if [ -n "${pids[$i]}" ] && ! kill -0 "${pids[$i]}" 2>/dev/null; then
			wait "${pids[$i]}" 2>/dev/null
			echo "${names[$i]} (pid ${pids[$i]}) exited with status $?; its log is $OUT/${names[$i]}.log" >&2
			pids[$i]=""
		fi
	done
done
