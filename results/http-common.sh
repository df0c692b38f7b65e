# What the HTTP benchmark scripts share; sourced by results/http-bench.sh and
# results/http-churn.sh from the repository root.

# Builds the example server and names its binary.
cargo build --release --features tower,metrics,redis,config --example http_server
SERVER=target/release/examples/http_server

# The median of the whitespace-separated numbers on standard input.
median() {
  tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

# The server's flags for a configuration: no-limits and generous are flags of their
# own; generous-no-recorder is generous without a metrics recorder (the limiters are
# named but report to no one); generous-in-code is generous built in code, a fixed
# layer; limited is the endpoint table as shipped.
flags_of() {
  case "$1" in
    limited) ;;
    generous-no-recorder) echo "--generous --no-recorder" ;;
    generous-in-code) echo "--generous --in-code" ;;
    *) echo "--$1" ;;
  esac
}
