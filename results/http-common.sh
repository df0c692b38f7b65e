# What the HTTP benchmark scripts share; sourced by results/http-bench.sh and
# results/http-churn.sh from the repository root.

# Builds the example server and names its binary.
cargo build --release --features tower --example http_server
SERVER=target/release/examples/http_server

# The median of the whitespace-separated numbers on standard input.
median() {
  tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
