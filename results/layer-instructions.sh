#!/usr/bin/env bash
# Instructions per request through a fixed layer and through the same table as a
# reloadable one (LiveLimits::layer), with the steps between, counted by callgrind:
# repeatable where nanoseconds on a shared machine are not. Not run in CI. Needs
# valgrind. Only the requests are counted (--toggle-collect on
# benches/layer_instructions.rs's `measured`), so instructions / N is the cost of one
# request (built, through the layer, its future polled once; one token bucket check,
# allowed). One key by default, so that every run counts the same (with several, the
# store's hash seed, random per run, moves a few instructions between runs: KEYS=16
# RUNS=5 gives the median of five). The last column is glibc's memcmp per request: its
# count depends on where the compared bytes lie (near a page's end or not), which
# moves with the build and the environment's size by 8 or so; compare layers whose
# memcmp agrees, or subtract it.
#
#   bash results/layer-instructions.sh        # N = 100000, every layer
#   bash results/layer-instructions.sh live   # one layer; where its instructions go
#                                             # (per function, inclusive) follows
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-100000}
KEYS=${KEYS:-1}
RUNS=${RUNS:-1}
OUT=$(mktemp -d)
trap 'rm -r "$OUT"' EXIT

BIN=$(cargo bench --features config --bench layer_instructions --no-run --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)

NAMES=("$@")
[ ${#NAMES[@]} -eq 0 ] && NAMES=(fixed fixed-reconfigurable fixed-dyn live)

printf '%-22s %12s %10s %8s\n' layer per-request vs-first memcmp
first=
for name in "${NAMES[@]}"; do
  totals=()
  for run in $(seq 1 "$RUNS"); do
    valgrind --tool=callgrind --toggle-collect='*measured*' \
      --callgrind-out-file="$OUT/$name" "$BIN" "$name" "$N" "$KEYS" >/dev/null 2>&1
    totals+=("$(awk '/^(summary|totals):/ {print $2; exit}' "$OUT/$name")")
  done
  total=$(printf '%s\n' "${totals[@]}" | sort -n | sed -n "$(((RUNS + 1) / 2))p")
  [ -z "$first" ] && first=$total
  memcmp=$(callgrind_annotate --inclusive=no --auto=no --threshold=100 "$OUT/$name" |
    awk -v n="$N" '/memcmp/ { c = $1; gsub(",", "", c); m += c } END { printf "%.1f", m / n }')
  printf '%-22s %12.1f %+9.2f%% %8s\n' "$name" "$(echo "$total / $N" | bc -l)" \
    "$(echo "($total - $first) * 100 / $first" | bc -l)" "$memcmp"
done

if [ $# -eq 1 ]; then
  echo
  echo "where $1's requests go (instructions per request, per function, inclusive; >= 1):"
  callgrind_annotate --inclusive=yes --auto=no "$OUT/$1" |
    awk -v n="$N" '/file:function/ { table = 1; next }
      table && /^ *[0-9,]+ +\(/ {
        count = $1; gsub(",", "", count)
        line = $0; sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "", line)
        sub(/.*\/registry\/src\/[^\/]*\//, "", line); sub(/.*\/library\//, "std: ", line)
        if (count / n >= 1) printf "%8.1f  %s\n", count / n, line }'
fi
