#!/usr/bin/env bash
# A Prometheus scrape of examples/http_server.rs after load: wrk against /balance with
# one API key (nearly every request refused by the per-user limit), a handful of
# requests without a key (400) and to /login, then `GET /metrics`; prints wrk's summary
# and the turnstile series that counted something. Not run in CI. Needs wrk and curl.
#
#   bash results/http-scrape.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ADDR=127.0.0.1:3919
source results/http-common.sh

"$SERVER" "$ADDR" >/dev/null &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true' EXIT
sleep 0.5
wrk -t1 -c16 -d5s -H 'x-api-key: alice' "http://$ADDR/balance" | grep -E 'Requests/sec|requests in|Non-2xx'
for _ in 1 2 3; do curl -s -o /dev/null "http://$ADDR/balance"; done
for _ in 1 2 3 4 5 6 7; do curl -s -o /dev/null -X POST -H 'x-api-key: bob' "http://$ADDR/login"; done
echo
curl -s "http://$ADDR/metrics" | grep '^turnstile' | grep -v ' 0$' | sort
