#!/usr/bin/env bash
# Worst-case latency through examples/http_server.rs (generous quotas, so every
# request passes and is decided by the layer) under wrk on loopback: every request with
# the same API key, against every request with a key never seen before (the per-user
# limiter gains a key per request and must forget them as it goes). Interleaved, RUNS
# times each; prints wrk's p99 and maximum for every run and their medians. Not run in
# CI. Needs wrk (Debian: apt-get install wrk).
#
#   bash results/http-churn.sh            # 5 runs of 10 s per configuration
#   RUNS=3 SECONDS_PER_RUN=20 bash results/http-churn.sh
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
CONNECTIONS=${CONNECTIONS:-16}
ADDR=127.0.0.1:3918
URL="http://$ADDR/balance"

source results/http-common.sh

SCRIPT=$(mktemp --suffix .lua)
trap 'rm -f "$SCRIPT"' EXIT
# A new x-api-key on every request: a counter, and a random prefix so that a
# warm-up's keys and the measured run's never meet.
cat >"$SCRIPT" <<'LUA'
local prefix = tostring(math.random(1, 1e9))
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, nil, { ["x-api-key"] = prefix .. "-" .. n })
end
LUA

# wrk prints latencies as 812.00us, 1.23ms or 2.01s: in microseconds.
to_us() {
  awk '{ v = $1; if (v ~ /us$/) { sub(/us$/, "", v); print v }
         else if (v ~ /ms$/) { sub(/ms$/, "", v); print v * 1000 }
         else if (v ~ /s$/) { sub(/s$/, "", v); print v * 1000000 } }'
}

CONFIGS=(one-key unique-keys)
declare -A P99 MAX RPS

for run in $(seq 1 "$RUNS"); do
  for config in "${CONFIGS[@]}"; do
    "$SERVER" "$ADDR" --generous >/dev/null &
    server_pid=$!
    sleep 0.5
    args=(-t1 -c"$CONNECTIONS" --latency -H 'x-api-key: alice')
    [ "$config" = unique-keys ] && args=(-t1 -c"$CONNECTIONS" --latency -s "$SCRIPT")
    wrk "${args[@]}" -d2s "$URL" >/dev/null
    out=$(wrk "${args[@]}" -d"${SECONDS_PER_RUN}s" "$URL")
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out" | to_us)
    max=$(awk '$1 == "Latency" {print $4}' <<<"$out" | to_us)
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    echo "run $run $config: $rps req/s, p99 ${p99} us, max ${max} us"
    P99[$config]+="$p99 "
    MAX[$config]+="$max "
    RPS[$config]+="$rps "
  done
done

echo
echo "medians of $RUNS runs: configuration, req/s, p99 us, max us"
for config in "${CONFIGS[@]}"; do
  echo "$config $(median <<<"${RPS[$config]}") $(median <<<"${P99[$config]}") $(median <<<"${MAX[$config]}")"
done
