#!/usr/bin/env bash
# The 10M-key stream, 3 interleaved rounds: every limiter at 1 and 2 request threads,
# each run its own process under /usr/bin/time. Output: results/memory-stream.txt
# (summarised in results/memory-stream.md). Run from the repository root after
# `cargo bench --bench memory --no-run`.
set -euo pipefail
bin=$(ls -t target/release/deps/memory-* | grep -v '\.d$' | head -1)
echo "binary $bin commit $(git rev-parse --short HEAD) $(date -u)"
for round in 1 2 3; do
  for limiter in turnstile turnstile-words turnstile-capped governor; do
    for threads in 1 2; do
      echo "round $round load $(cut -d' ' -f1 /proc/loadavg)"
      /usr/bin/time -f "cpu %U %S wall %e" "$bin" --stream "$limiter" "$threads" 2>&1
    done
  done
done
echo "end $(date -u)"
