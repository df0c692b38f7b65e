#!/usr/bin/env bash
# Instructions per request through examples/http_server.rs with and without the
# rate-limit layer, counted by callgrind: repeatable where requests per second on a
# shared machine are not. Not run in CI. Needs valgrind and curl.
#
# For each configuration: start the server under callgrind, send 1,000 warm-up
# requests, zero the counters, send N requests on one keep-alive connection (curl's
# URL ranges), dump the counters; instructions / N is the server's cost per request,
# every thread included (the counts also include the runtime's idle polling while
# curl waits, which is small and the same in every configuration).
#
#   bash results/http-instructions.sh        # N = 5000
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-5000}
ADDR=127.0.0.1:3918
OUT=$(mktemp -d)

source results/http-common.sh

for config in no-limits generous generous-no-recorder limited; do
  read -ra flag <<<"$(flags_of "$config")"
  valgrind --tool=callgrind --callgrind-out-file="$OUT/$config.%p" \
    "$SERVER" "$ADDR" "${flag[@]}" >/dev/null 2>"$OUT/$config.log" &
  pid=$!
  for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://$ADDR/" && break
    sleep 0.3
  done
  curl -s -o /dev/null -H 'x-api-key: alice' "http://$ADDR/balance?[1-1000]"
  callgrind_control -z "$pid" >/dev/null 2>&1
  curl -s -o /dev/null -H 'x-api-key: alice' "http://$ADDR/balance?[1-$N]"
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  dump=$(ls "$OUT/$config".*.1)
  total=$(awk '/^(summary|totals):/ {print $2; exit}' "$dump")
  echo "$config $((total / N)) instructions/request"
done
rm -r "$OUT"
