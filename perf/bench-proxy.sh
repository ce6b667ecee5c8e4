#!/usr/bin/env bash
# bench-proxy.sh: kvroute's proxy against nginx's round-robin proxy, on this
# machine, in one run. Four trivial backends (one nginx, worker_processes 1,
# `return 200` with a fixed completion) sit behind both kvroute serve
# (--worker ...,model=m for each) and an nginx proxy (one worker process,
# keep-alive upstream of the same four). cmd/loadgen's closed-loop clients
# (32, 2 KB prompts in 64 prefix groups) drive the two alternately, ROUNDS
# times. Each run's line carries the proxy's own CPU time per request (from
# /proc: kvroute's process, nginx's worker process), which the other load on
# a shared machine disturbs far less than req/s, and the 1-minute load
# average before and after; the summary gives each system's medians and the
# ratios kvroute/nginx. BARE=1 adds the system "bare" (loadgen -bare-proxy:
# fasthttp and wire/proxy round robin, no routing), the floor of kvroute's
# proxying stack.
#
# Needs nginx (apt-get install nginx-light); installs nothing itself.
# Settings: ROUNDS (3), DURATION (5s), WARMUP (1s), CLIENTS (32),
# KVROUTE_ARGS (extra kvroute serve flags), OUT (out/bench-proxy);
# BASE=REV also runs kvroute built from git revision REV (system "base",
# between nginx and kvroute in each round) for a before/after comparison;
# PROFILE=1 also writes a CPU profile of kvroute during each of its runs
# (OUT/kvroute-N.pprof, go tool pprof -top OUT/kvroute OUT/kvroute-N.pprof).
set -euo pipefail
rounds=${ROUNDS:-3} duration=${DURATION:-5s} warmup=${WARMUP:-1s} clients=${CLIENTS:-32}
top=$(git rev-parse --show-toplevel)
out=${OUT:-$top/out/bench-proxy}
nginx=$(command -v nginx || true)
[ -n "$nginx" ] || [ -x /usr/sbin/nginx ] && nginx=${nginx:-/usr/sbin/nginx}
if [ ! -x "$nginx" ]; then
  echo "bench-proxy: nginx not found; install it (apt-get install -y nginx-light)" >&2
  exit 2
fi
rm -rf "$out" && mkdir -p "$out/nginx-backends" "$out/nginx-proxy"
(cd "$top" && go build -o "$out/kvroute" ./cmd/kvroute && go build -o "$out/loadgen" ./cmd/loadgen)
if [ -n "${BASE:-}" ]; then
  wt=$(mktemp -d)
  git -C "$top" worktree add --detach "$wt" "$BASE" >/dev/null 2>&1
  (cd "$wt" && go build -o "$out/kvroute-base" ./cmd/kvroute)
  git -C "$top" worktree remove --force "$wt"
fi

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
b1=$(port) b2=$(port) b3=$(port) b4=$(port) np=$(port) kp=$(port) ap=$(port) bp=$(port) bap=$(port) xp=$(port)
body='{"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"m","choices":[{"index":0,"text":" fixed answer of the trivial backend","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":2048,"completion_tokens":16,"total_tokens":2064}}'
common='daemon off; master_process on; error_log stderr warn; pid PID;
events { worker_connections 4096; }'
cat > "$out/nginx-backends/nginx.conf" <<CONF
${common/PID/$out/nginx-backends/nginx.pid}
worker_processes 1;
http {
  access_log off;
  client_body_buffer_size 64k;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$b1; listen 127.0.0.1:$b2; listen 127.0.0.1:$b3; listen 127.0.0.1:$b4;
    location / { default_type application/json; return 200 '$body'; }
  }
}
CONF
cat > "$out/nginx-proxy/nginx.conf" <<CONF
${common/PID/$out/nginx-proxy/nginx.pid}
worker_processes 1;
http {
  access_log off;
  client_body_buffer_size 64k;
  keepalive_requests 1000000;
  upstream workers {
    server 127.0.0.1:$b1; server 127.0.0.1:$b2; server 127.0.0.1:$b3; server 127.0.0.1:$b4;
    keepalive 64;
  }
  server {
    listen 127.0.0.1:$np;
    location / { proxy_pass http://workers; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
for d in nginx-backends nginx-proxy; do
  "$nginx" -p "$out/$d" -c "$out/$d/nginx.conf" -e stderr 2>"$out/$d/error.log" &
  pids+=($!)
done
proxymaster=$!
serve() { # binary http-port admin-port name
  "$1" serve --http-addr "127.0.0.1:$2" --admin-addr "127.0.0.1:$3" --data-dir "$out/$4-data" \
    --worker "1=http://127.0.0.1:$b1,model=m" --worker "2=http://127.0.0.1:$b2,model=m" \
    --worker "3=http://127.0.0.1:$b3,model=m" --worker "4=http://127.0.0.1:$b4,model=m" \
    ${PROFILE:+--pprof} ${KVROUTE_ARGS:-} >"$out/$4.log" 2>&1 &
  pids+=($!)
}
serve "$out/kvroute" "$kp" "$ap" kvroute
kvpid=$!
if [ -n "${BASE:-}" ]; then
  serve "$out/kvroute-base" "$bp" "$bap" base
  basepid=$!
fi
if [ -n "${BARE:-}" ]; then
  "$out/loadgen" -bare-proxy "127.0.0.1:$xp" \
    -workers "http://127.0.0.1:$b1,http://127.0.0.1:$b2,http://127.0.0.1:$b3,http://127.0.0.1:$b4" >"$out/bare.log" 2>&1 &
  pids+=($!)
  barepid=$!
fi
for i in $(seq 100); do
  curl -sf "http://127.0.0.1:$kp/ready" >/dev/null 2>&1 && { [ -z "${BASE:-}" ] || curl -sf "http://127.0.0.1:$bp/ready" >/dev/null 2>&1; } && curl -sf "http://127.0.0.1:$np/" -d '{}' >/dev/null 2>&1 && break
  [ "$i" = 100 ] && { echo "bench-proxy: kvroute or nginx did not start; see $out" >&2; exit 1; }
  sleep 0.1
done
nginxpid=$(pgrep -P "$proxymaster" | head -1)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime+stime, clock ticks
hz=$(getconf CLK_TCK)
echo "# bench-proxy: $clients clients, 2 KB prompts, 64 prefix groups, $duration per run, $rounds rounds, $(nproc) CPUs"
run() { # name url pid
  local l0 l1 line prof= c0 c1 n
  l0=$(cut -d' ' -f1 /proc/loadavg)
  c0=$(cpu "$3")
  if [ -n "${PROFILE:-}" ] && [ "$1" = kvroute ]; then
    secs=${duration%s}; secs=${secs%.*}
    curl -sf -o "$out/kvroute-$r.pprof" "http://127.0.0.1:$ap/debug/pprof/profile?seconds=$((secs > 1 ? secs - 1 : 1))" &
    prof=$!
  fi
  line=$("$out/loadgen" -url "$2" -clients "$clients" -duration "$duration" -warmup "$warmup")
  c1=$(cpu "$3")
  l1=$(cut -d' ' -f1 /proc/loadavg)
  [ -z "$prof" ] || wait "$prof" || true
  n=$(echo "$line" | awk '{print $10}')
  echo "$1 $line cpu/req $(awk -v c="$((c1 - c0))" -v n="$n" -v hz="$hz" 'BEGIN { printf "%.1fus", c / hz / n * 1e6 }') load $l0-$l1" | tee -a "$out/runs.txt"
}
for r in $(seq "$rounds"); do
  run nginx "http://127.0.0.1:$np/v1/completions" "$nginxpid"
  [ -z "${BASE:-}" ] || run base "http://127.0.0.1:$bp/v1/completions" "$basepid"
  [ -z "${BARE:-}" ] || run bare "http://127.0.0.1:$xp/v1/completions" "$barepid"
  run kvroute "http://127.0.0.1:$kp/v1/completions" "$kvpid"
done
awk '
  { rps[$1] = rps[$1] " " $3; p50[$1] = p50[$1] " " $5; p99[$1] = p99[$1] " " $7; cpr[$1] = cpr[$1] " " $15 }
  function med(s,   a, n, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) { sub(/(ms|us)$/, "", a[i]); a[i] += 0 }
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return a[int((n + 1) / 2)] }
  END {
    printf "median  nginx   req/s %.0f p50 %.2fms p99 %.2fms cpu/req %.1fus\n", med(rps["nginx"]), med(p50["nginx"]), med(p99["nginx"]), med(cpr["nginx"])
    printf "median  kvroute req/s %.0f p50 %.2fms p99 %.2fms cpu/req %.1fus\n", med(rps["kvroute"]), med(p50["kvroute"]), med(p99["kvroute"]), med(cpr["kvroute"])
    printf "ratio kvroute/nginx: throughput %.2f (target >= 0.9), p50 %.2f, p99 %.2f (target <= 1.2), cpu/req %.2f\n",
      med(rps["kvroute"]) / med(rps["nginx"]), med(p50["kvroute"]) / med(p50["nginx"]), med(p99["kvroute"]) / med(p99["nginx"]), med(cpr["kvroute"]) / med(cpr["nginx"])
    if ("bare" in rps) {
      printf "median  bare    req/s %.0f p50 %.2fms p99 %.2fms cpu/req %.1fus\n", med(rps["bare"]), med(p50["bare"]), med(p99["bare"]), med(cpr["bare"])
      printf "ratio bare/nginx: throughput %.2f, p99 %.2f, cpu/req %.2f; kvroute/bare: throughput %.2f, p99 %.2f, cpu/req %.2f\n",
        med(rps["bare"]) / med(rps["nginx"]), med(p99["bare"]) / med(p99["nginx"]), med(cpr["bare"]) / med(cpr["nginx"]),
        med(rps["kvroute"]) / med(rps["bare"]), med(p99["kvroute"]) / med(p99["bare"]), med(cpr["kvroute"]) / med(cpr["bare"])
    }
    if ("base" in rps) {
      printf "median  base    req/s %.0f p50 %.2fms p99 %.2fms cpu/req %.1fus\n", med(rps["base"]), med(p50["base"]), med(p99["base"]), med(cpr["base"])
      printf "ratio base/nginx: throughput %.2f, p99 %.2f, cpu/req %.2f; kvroute/base: throughput %.2f, p99 %.2f, cpu/req %.2f\n",
        med(rps["base"]) / med(rps["nginx"]), med(p99["base"]) / med(p99["nginx"]), med(cpr["base"]) / med(cpr["nginx"]),
        med(rps["kvroute"]) / med(rps["base"]), med(p99["kvroute"]) / med(p99["base"]), med(cpr["kvroute"]) / med(cpr["base"])
    }
  }' "$out/runs.txt"
