#!/usr/bin/env bash
# Requests per second through examples/http_server.rs with and without the rate-limit
# layer, under wrk on loopback: three configurations, interleaved, RUNS times each;
# prints every run and the medians. Not run in CI. Needs wrk (Debian: apt-get install
# wrk).
#
# Besides requests per second it reports the server's CPU time per request (user +
# system, from /proc), which other processes on a shared machine disturb far less than
# throughput: they steal the server's wall-clock time, not its CPU time.
#
#   bash results/http-bench.sh            # 5 runs of 10 s per configuration
#   RUNS=3 SECONDS_PER_RUN=20 bash results/http-bench.sh
#   CONFIGS="generous generous-in-code" bash results/http-bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
CONNECTIONS=${CONNECTIONS:-16}
ADDR=127.0.0.1:3917
URL="http://$ADDR/balance"
TICKS_PER_SECOND=$(getconf CLK_TCK)

source results/http-common.sh

# The server's CPU time so far, in clock ticks (utime + stime of /proc/PID/stat).
cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$1/stat"
}

# no-limits: the same server without the layer; generous: the layer and all its
# checks with quotas so large every request passes (the cost of checking), its
# metrics recorded by the Prometheus exporter; generous-no-recorder: the same with no
# recorder installed (the cost of recording, by difference); limited: the endpoint
# table as shipped, so all but the first requests are refused with 429 (the cost of
# refusing).
# CONFIGS="generous generous-in-code" compares the table read from the file (a
# reloadable layer) with the same table built in code (a fixed layer).
read -ra CONFIGS <<<"${CONFIGS:-no-limits generous generous-no-recorder limited}"
declare -A RPS CPU

for run in $(seq 1 "$RUNS"); do
  for config in "${CONFIGS[@]}"; do
    read -ra flag <<<"$(flags_of "$config")"
    "$SERVER" "$ADDR" "${flag[@]}" >/dev/null &
    server_pid=$!
    sleep 0.5
    # Warm-up, then the measured run.
    wrk -t1 -c"$CONNECTIONS" -d2s -H 'x-api-key: alice' "$URL" >/dev/null
    before=$(cpu_ticks "$server_pid")
    out=$(wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" -H 'x-api-key: alice' "$URL")
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
  done
done

echo
echo "medians of $RUNS runs: configuration, req/s, server CPU us/request"
for config in "${CONFIGS[@]}"; do
  echo "$config $(median <<<"${RPS[$config]}") $(median <<<"${CPU[$config]}")"
done
