#!/usr/bin/env bash
# Instructions per check for every contender and algorithm, counted by callgrind:
# repeatable where nanoseconds on a shared machine are not. Not run in CI. Needs
# valgrind. One thread, the uniform pattern (1,000 keys, all stored before counting);
# only the checks are counted (--toggle-collect on benches/instructions.rs's
# `measured`), so instructions / N is the cost of one check.
#
#   bash results/instructions.sh            # N = 200000, every contender, both mixes
#   bash results/instructions.sh turnstile  # one contender; its annotated profile
#                                           # (instructions per source file) follows
#   bash results/instructions.sh settle-token-bucket  # settles, not checks: its three
#                                           # columns are a charge, a give-back and an acquire
#                                           # (any algorithm after `settle-`)
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-200000}
OUT=$(mktemp -d)
trap 'rm -r "$OUT"' EXIT

BIN=$(cargo bench --bench instructions --no-run --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)

NAMES=("$@")
[ ${#NAMES[@]} -eq 0 ] && NAMES=(floor-clock floor-lookup floor-cas floor-stack turnstile turnstile-recent
  mutex-per-key global-lock governor token-bucket gcra fixed-window sliding-window sliding-log
  direct-turnstile direct-turnstile-gcra direct-governor)

if [[ ${NAMES[0]} == settle-* ]]; then
  printf '%-18s %8s %8s %8s\n' contender charge give-back acquire
else
  printf '%-18s %8s %8s\n' contender allowed denied
fi
for name in "${NAMES[@]}"; do
  row=$(printf '%-18s' "$name")
  mixes=(allowed denied)
  [[ $name == settle-* ]] && mixes=(charge give-back acquire)
  for mix in "${mixes[@]}"; do
    valgrind --tool=callgrind --toggle-collect='*measured*' \
      --callgrind-out-file="$OUT/$name.$mix" "$BIN" "$name" "$mix" "$N" >/dev/null 2>&1
    total=$(awk '/^(summary|totals):/ {print $2; exit}' "$OUT/$name.$mix")
    row+=$(printf ' %8d' $((total / N)))
  done
  echo "$row"
done

if [ $# -eq 1 ]; then
  mixes=(allowed denied)
  [[ $1 == settle-* ]] && mixes=(charge give-back acquire)
  for mix in "${mixes[@]}"; do
    echo
    echo "where $1's $mix checks go (instructions per check, by source file, inlined code included):"
    callgrind_annotate --inclusive=no --auto=no "$OUT/$1.$mix" |
      awk -v n="$N" '/file:function/ { table = 1; next }
        table && /^ *[0-9,]+ +\(/ {
          count = $1; gsub(",", "", count)
          line = $0; sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "", line)
          split(line, parts, ":"); file = parts[1]
          sub(/.*\/registry\/src\/[^\/]*\//, "", file); sub(/.*\/library\//, "std: ", file)
          cost[file] += count }
        END { for (f in cost) if (cost[f] / n >= 0.5) printf "%8.1f  %s\n", cost[f] / n, f }' |
      sort -rn
  done
fi
