#!/usr/bin/env bash
# Every figure issue 45 asks for, in one run on one commit (summarised in
# results/issue-45.md). Not run in CI. Needs valgrind. Run from anywhere, on an
# otherwise idle machine; about 20 minutes on the 2-core VM:
#
#   bash results/issue-45.sh [OUT]     # OUT defaults to results/issue-45
#
# What it runs, in order (the benchmarks are built first, so no compilation falls
# inside a measurement):
#   1. instructions (callgrind, repeatable whatever the load): a stored key's check
#      (allowed, denied) and a new key (the churn mix: every check a key never seen,
#      in a limiter built fresh with default settings) for turnstile (the ring),
#      turnstile-presized (`expected_keys`), the word store, governor and the floors
#      (papaya's bare insertion: floor-insert; its insert-and-remove: floor-stack);
#   2. memory: bytes per key at 1M keys, one 10M-key stream per limiter, the sweep's
#      pause over 1M keys (`benches/memory.rs`, all of it);
#   3. the 10M-key stream again, 3 interleaved rounds (`memory-stream.sh`): medians;
#      then with one malloc arena (what glibc's per-thread arenas add);
#   4. throughput ratios to governor, full mode (21+ interleaved rounds of 100 ms):
#      hot, uniform and zipf at 1, 2 and 4 threads; churn at 1, 2 and 4 with the
#      presized ring and the floors beside;
#   5. churn latency (p50, p99, p99.9, max) at 2 and 4 threads, 3 runs.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-results/issue-45}")
mkdir -p "$OUT"
N=200000

stamp() { echo "== $1: $(date -u '+%F %T') UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"; }

{
  echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src benches || echo ' (dirty)')"
  echo "machine $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  rustc --version
  stamp start
} | tee "$OUT/run.txt"

cargo bench --bench instructions --bench memory --bench ratios --bench latency --no-run \
  >/dev/null 2>&1
instructions=$(cargo bench --bench instructions --no-run --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)

# 1. Instructions per check: only the checks are counted (`measured` toggles).
stamp instructions | tee -a "$OUT/run.txt"
echo "contender,mix,instructions_per_check" >"$OUT/instructions.csv"
count() { # contender mix
  local file="$OUT/callgrind.$1.$2"
  valgrind --tool=callgrind --toggle-collect='*measured*' --callgrind-out-file="$file" \
    "$instructions" "$1" "$2" "$N" >/dev/null 2>&1
  local total
  total=$(awk '/^(summary|totals):/ {print $2; exit}' "$file")
  echo "$1,$2,$((total / N))" | tee -a "$OUT/instructions.csv"
}
for contender in turnstile turnstile-words governor floor-lookup; do
  count "$contender" allowed
  count "$contender" denied
done
for contender in turnstile turnstile-presized turnstile-words governor floor-insert floor-stack; do
  count "$contender" churn
done
# Where a new key's instructions go, by function (inclusive), for the ring and the
# word store.
for contender in turnstile turnstile-words floor-insert; do
  callgrind_annotate --inclusive=yes --auto=no "$OUT/callgrind.$contender.churn" 2>/dev/null |
    head -80 >"$OUT/new-key-profile.$contender.txt"
done
rm -f "$OUT"/callgrind.*

# 2. Memory per key, one stream each, the sweep's pause.
stamp memory | tee -a "$OUT/run.txt"
TURNSTILE_BENCH_OUT="$OUT" cargo bench --bench memory >"$OUT/memory.txt" 2>&1

# 3. The stream, 3 interleaved rounds.
stamp memory-stream | tee -a "$OUT/run.txt"
bash results/memory-stream.sh >"$OUT/memory-stream.txt" 2>&1

# 3b. What glibc's per-thread malloc arenas add: the same stream with one arena
#     (MALLOC_ARENA_MAX=1), 3 rounds at 1 and 2 request threads.
stamp one-arena | tee -a "$OUT/run.txt"
stream=$(ls -t target/release/deps/memory-* | grep -v '\.d$' | head -1)
for round in 1 2 3; do
  for limiter in turnstile turnstile-capped turnstile-words; do
    for threads in 1 2; do
      MALLOC_ARENA_MAX=1 "$stream" --stream "$limiter" "$threads" 2>&1 | grep thr:
    done
  done
done >"$OUT/memory-stream-one-arena.txt"

# 4. Throughput ratios to governor: hot, uniform and zipf with the rivals; churn also
#    with the presized ring and papaya's bare insertion.
stamp ratios | tee -a "$OUT/run.txt"
ratios() { # directory patterns limiters
  mkdir -p "$OUT/$1"
  TURNSTILE_BENCH_OUT="$OUT/$1" TURNSTILE_BENCH_MODE=full TURNSTILE_BENCH_THREADS=1,2,4 \
    TURNSTILE_BENCH_PATTERNS="$2" TURNSTILE_BENCH_LIMITERS="$3" \
    cargo bench --bench ratios >"$OUT/$1/ratios.txt" 2>&1
}
ratios ratios hot,uniform,zipf turnstile,turnstile-words,governor,floor-stack
stamp churn | tee -a "$OUT/run.txt"
ratios churn churn turnstile,turnstile-presized,turnstile-words,governor,floor-insert,floor-stack

# 5. Churn latency at 2 and 4 threads, three runs.
for run in 1 2 3; do
  stamp "latency $run" | tee -a "$OUT/run.txt"
  mkdir -p "$OUT/latency-$run"
  TURNSTILE_BENCH_OUT="$OUT/latency-$run" TURNSTILE_BENCH_PATTERNS=churn \
    TURNSTILE_BENCH_LIMITERS=turnstile,turnstile-words,governor \
    cargo bench --bench latency >"$OUT/latency-$run/latency.txt" 2>&1
done
stamp end | tee -a "$OUT/run.txt"
