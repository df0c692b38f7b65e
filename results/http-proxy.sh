#!/usr/bin/env bash
# RealIp behind three trusted hops against PeerIp: the extractor alone (callgrind
# instructions per call, then criterion), and the example server under wrk (requests
# per second and server CPU per request, interleaved; then callgrind instructions per
# request). Not run in CI. Needs valgrind, curl and wrk (Debian: apt-get install wrk).
#
# Every request carries the same `X-Forwarded-For: 203.0.113.7, 10.0.0.3, 10.0.0.2`
# from 127.0.0.1, so the servers parse the same bytes and differ only in the key:
#   no-limits  the server without the layer;
#   peer-ip    the layer keyed per IP by PeerIp (the header is not read);
#   real-ip    the layer keyed per IP by RealIp trusting 127.0.0.1 and 10.0.0.0/8:
#              the peer and two entries are trusted, the third entry is the client.
# Both layers run the example's two checks with quotas of a million a second (every
# request allowed) and no metrics recorder.
#
#   bash results/http-proxy.sh                          # 7 runs of 8 s per server
#   RUNS=3 SECONDS_PER_RUN=10 N=5000 bash results/http-proxy.sh
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-7}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-8}
CONNECTIONS=${CONNECTIONS:-16}
N=${N:-5000}
CALLS=${CALLS:-1000000}
ADDR=127.0.0.1:3919
URL="http://$ADDR/balance"
HOPS='x-forwarded-for: 203.0.113.7, 10.0.0.3, 10.0.0.2'
TICKS_PER_SECOND=$(getconf CLK_TCK)
OUT=$(mktemp -d)
trap 'rm -r "$OUT"' EXIT

source results/http-common.sh

echo "== the extractor alone: instructions per call (callgrind, $CALLS calls)"
BENCH=$(cargo bench --features tower --bench http_proxy --no-run --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
for name in peer-ip real-ip-untrusted-peer real-ip-xff-3-hops real-ip-xff-3-hops-ipv6 \
  real-ip-forwarded-3-hops; do
  valgrind --tool=callgrind --toggle-collect='*measured*' \
    --callgrind-out-file="$OUT/$name" "$BENCH" --instructions "$name" "$CALLS" >/dev/null 2>&1
  total=$(awk '/^(summary|totals):/ {print $2; exit}' "$OUT/$name")
  echo "$name $((total / CALLS)) instructions/call"
done

echo
echo "== the extractor alone: time per call (criterion)"
"$BENCH" --bench --warm-up-time 2 --measurement-time 5 2>&1 | grep -E '^key/|time:'

proxy_flags() {
  case "$1" in
    no-limits) echo "--no-limits" ;;
    peer-ip) echo "--generous --no-recorder" ;;
    real-ip) echo "--generous --no-recorder --trust-proxy 127.0.0.1 --trust-proxy 10.0.0.0/8" ;;
  esac
}

cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$1/stat"
}

echo
echo "== the example server under wrk: $RUNS interleaved runs of ${SECONDS_PER_RUN}s"
CONFIGS=(no-limits peer-ip real-ip)
declare -A RPS CPU
RATIOS=""
for run in $(seq 1 "$RUNS"); do
  for config in "${CONFIGS[@]}"; do
    read -ra flag <<<"$(proxy_flags "$config")"
    "$SERVER" "$ADDR" "${flag[@]}" >/dev/null &
    server_pid=$!
    sleep 0.5
    wrk -t1 -c"$CONNECTIONS" -d2s -H 'x-api-key: alice' -H "$HOPS" "$URL" >/dev/null
    before=$(cpu_ticks "$server_pid")
    out=$(wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" -H 'x-api-key: alice' -H "$HOPS" "$URL")
    after=$(cpu_ticks "$server_pid")
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    requests=$(awk '/requests in/ {print $1}' <<<"$out")
    non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out")
    cpu_us=$(awk -v t=$((after - before)) -v hz="$TICKS_PER_SECOND" -v n="$requests" \
      'BEGIN {printf "%.2f", t / hz * 1e6 / n}')
    echo "run $run $config: $rps req/s, $cpu_us us server CPU/request (non-2xx: ${non2xx:-0})"
    RPS[$config]+="$rps "
    CPU[$config]+="$cpu_us "
    eval "last_$(tr - _ <<<"$config")=$rps"
  done
  # shellcheck disable=SC2154 # set by the eval above
  RATIOS+="$(awk -v r="$last_real_ip" -v p="$last_peer_ip" 'BEGIN {printf "%.3f", r / p}') "
done
echo
echo "medians of $RUNS runs: configuration, req/s, server CPU us/request"
for config in "${CONFIGS[@]}"; do
  echo "$config $(median <<<"${RPS[$config]}") $(median <<<"${CPU[$config]}")"
done
echo "real-ip / peer-ip req/s, run by run: $RATIOS(median $(median <<<"$RATIOS"))"

echo
echo "== the example server: instructions per request (callgrind, $N requests)"
for config in "${CONFIGS[@]}"; do
  read -ra flag <<<"$(proxy_flags "$config")"
  valgrind --tool=callgrind --callgrind-out-file="$OUT/server-$config.%p" \
    "$SERVER" "$ADDR" "${flag[@]}" >/dev/null 2>"$OUT/server-$config.log" &
  pid=$!
  for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://$ADDR/" && break
    sleep 0.3
  done
  curl -s -o /dev/null -H 'x-api-key: alice' -H "$HOPS" "$URL?[1-1000]"
  callgrind_control -z "$pid" >/dev/null 2>&1
  curl -s -o /dev/null -H 'x-api-key: alice' -H "$HOPS" "$URL?[1-$N]"
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  dump=$(ls "$OUT/server-$config".*.1)
  total=$(awk '/^(summary|totals):/ {print $2; exit}' "$dump")
  echo "$config $((total / N)) instructions/request"
done
