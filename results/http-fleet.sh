#!/usr/bin/env bash
# One limit for a fleet: two example servers (separate processes) on one Redis, and a
# client whose requests alternate between them. Shared through Redis (plain and
# leased), they admit the client's quota once between them; in process, each admits
# it. Then requests per second, one server at a time, in process against Redis.
#
#   bash results/http-fleet.sh          # the admissions, then 3 interleaved wrk runs
#   RUNS=0 bash results/http-fleet.sh   # the admissions only
set -euo pipefail
cd "$(dirname "$0")/.."
source results/http-common.sh

REDIS_PORT=6397
REDIS_URL="redis://127.0.0.1:$REDIS_PORT/"
RUNS=${RUNS:-3}
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --daemonize no >/dev/null 2>&1 &
REDIS=$!
PIDS=()
cleanup() { kill "${PIDS[@]}" "$REDIS" 2>/dev/null || true; }
trap cleanup EXIT
until redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; do sleep 0.05; done

# Starts a server on port $1 with flags $2..; waits until /metrics (not limited) answers.
start() {
  local port=$1; shift
  "$SERVER" "127.0.0.1:$port" "$@" >/dev/null &
  PIDS+=($!)
  until curl -s -o /dev/null "http://127.0.0.1:$port/metrics"; do sleep 0.05; done
}

stop_all() { kill "${PIDS[@]}" 2>/dev/null || true; wait "${PIDS[@]}" 2>/dev/null || true; PIDS=(); }

# 400 GET /balance for user alice, alternating between ports 3921 and 3922, over
# kept-alive connections (one curl, well within a second: /balance's 100 a minute
# refills one token per 600 ms). Prints the 200s per server.
spread() {
  local config
  config=$(mktemp)
  for i in $(seq 1 200); do
    for port in 3921 3922; do
      printf 'url = "http://127.0.0.1:%s/balance"\noutput = "/dev/null"\n' "$port" >>"$config"
    done
  done
  curl -s -H 'x-api-key: alice' -w '%{http_code} %{url_effective}\n' -K "$config" |
    awk '$1 == 200 { split($2, a, ":"); split(a[3], p, "/"); ok[p[1]]++ }
         { codes[$1]++ }
         END { printf "  admitted: %d (3921: %d, 3922: %d); statuses:", ok[3921] + ok[3922], ok[3921], ok[3922];
               for (c in codes) printf " %s×%d", c, codes[c]; print "" }'
  rm "$config"
}

echo "== two servers, one client spread across both (GET /balance: 100 a minute per user)"
for mode in in-process redis leased; do
  redis-cli -p "$REDIS_PORT" flushall >/dev/null
  case $mode in
    in-process) flags=() ;;
    redis) flags=(--redis "$REDIS_URL") ;;
    leased) flags=(--redis "$REDIS_URL" --leased) ;;
  esac
  start 3921 "${flags[@]}"
  start 3922 "${flags[@]}"
  echo "$mode:"
  spread
  stop_all
done

[ "$RUNS" -eq 0 ] && exit 0

# Requests per second of one server, every request allowed (generous quotas): the
# layer with two checks in process, in Redis, leased; one Redis check through the
# layer against a bare handler that asks the same Redis limiter itself.
CONFIGS=("generous" "generous-redis" "generous-leased" "one-check-redis" "bare-redis")
flags_for() {
  case "$1" in
    generous) echo "--generous" ;;
    generous-redis) echo "--generous --redis $REDIS_URL" ;;
    generous-leased) echo "--generous --redis $REDIS_URL --leased" ;;
    one-check-redis) echo "--generous --one-check --redis $REDIS_URL" ;;
    bare-redis) echo "--generous --bare --redis $REDIS_URL" ;;
  esac
}
declare -A RESULTS
for run in $(seq 1 "$RUNS"); do
  for config in "${CONFIGS[@]}"; do
    # shellcheck disable=SC2046
    start 3923 $(flags_for "$config") --no-recorder
    wrk -t1 -c16 -d2s -H 'x-api-key: alice' http://127.0.0.1:3923/balance >/dev/null
    rps=$(wrk -t1 -c16 -d10s -H 'x-api-key: alice' http://127.0.0.1:3923/balance |
      awk '/Requests\/sec/ {print $2}')
    non2xx=$(wrk -t1 -c16 -d1s -H 'x-api-key: alice' http://127.0.0.1:3923/balance |
      awk '/Non-2xx/ {print $5}')
    echo "run $run $config: $rps requests/s (non-2xx in a 1 s probe: ${non2xx:-0})"
    RESULTS[$config]="${RESULTS[$config]:-} $rps"
    stop_all
  done
done
echo "== medians of $RUNS runs (requests/s)"
for config in "${CONFIGS[@]}"; do
  printf '%-18s %s\n' "$config" "$(echo "${RESULTS[$config]}" | median)"
done
