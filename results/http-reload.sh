#!/usr/bin/env bash
# The transcript of results/http.md, "Limits reloaded live": the example server
# running from a copy of examples/limits.toml, a quota lowered on disk, then 429s at
# the new rate with no key reset. Run from the repository root; prints the
# transcript. BUILD=debug (default) or release.
set -euo pipefail
BUILD=${BUILD:-debug}
ADDR=127.0.0.1:3077
FILE=$(mktemp --suffix .toml)
LOG=$(mktemp)
flag=(); [ "$BUILD" = release ] && flag=(--release)
cargo build -q "${flag[@]}" --features tower,metrics,redis,config --example http_server
cp examples/limits.toml "$FILE"
"target/$BUILD/examples/http_server" "$ADDR" --limits "$FILE" >"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER; rm -f "$FILE" "$LOG"' EXIT
sleep 1

login() { # user: the status and the RateLimit fields of one POST /login
  echo "\$ curl -si -X POST -H 'x-api-key: $1' http://$ADDR/login"
  curl -si -X POST -H "x-api-key: $1" "http://$ADDR/login" |
    grep -iE '^(HTTP|ratelimit|retry-after)' | tr -d '\r'
}

echo "# login: 5/min per user (limits.toml); alice uses 4 of her 5"
for _ in 1 2 3 4; do login alice; done
echo
echo "# on disk: login lowered to 2/min"
echo "\$ sed -i 's|quota = \"5/min\"|quota = \"2/min\"|' limits.toml"
sed -i 's|quota = "5/min"|quota = "2/min"|' "$FILE"
sleep 2.5 # the server polls the file every second
echo "# the server's log:"
tail -n +3 "$LOG" | sed 's/^/    /'
echo
echo "# alice had 1 left, and keeps it (capped at 2, not reset to 2), then 429"
login alice
login alice
echo
echo "# bob, a new key, gets the new quota: 2, then 429 (a token every 30 s)"
login bob
login bob
login bob
echo
echo "# a mistake on disk is refused, and the running limits stay"
echo "\$ sed -i 's|quota = \"2/min\"|quota = \"2 a minute\"|' limits.toml"
sed -i 's|quota = "2/min"|quota = "2 a minute"|' "$FILE"
sleep 2.5
login bob
echo "# fixed, then SIGHUP (each reloads: the file changed, then the signal)"
sed -i 's|quota = "2 a minute"|quota = "2/min"|' "$FILE"
sleep 2.5
kill -HUP $SERVER
sleep 0.5
echo "# the server's log since the first reload:"
tail -n +5 "$LOG" | sed 's/^/    /'
echo
echo "\$ curl -s http://$ADDR/metrics | grep turnstile_config_version"
curl -s "http://$ADDR/metrics" | grep '^turnstile_config_version'
