#!/usr/bin/env bash
# On the GPU host: cache-hit acquire+release round trips, 1/4/16 clients, over epkd's io threads and poll window
# (--io-threads, --spin-us), each setting run twice, alternately, so that all see the same machine. BIN holds epkd,
# epk_bench_rtt and lib/; every output goes to OUT (one tar), the summary lines to stdout.
#   LIMIT=150 bash rtt_compare.sh BIN [OUT]
set -uo pipefail
default_out=/tmp/epk_rtt
default_limit=150
source "$(cd "$(dirname "$0")" && pwd)/run_common.sh" "$@"
work=/tmp/epk_rtt_runs
rm -rf "$work"
mkdir -p "$work"
machine | tee "$work/machine.txt"

rtt() {  # NAME ARGS...: one epk_bench_rtt run
  local name="$1"
  shift
  [[ $(left) -gt 12 ]] || { echo "$name: skipped (time)"; return; }
  timeout 20 "$bin/epk_bench_rtt" --epkd "$bin/epkd" --clients 1,4,16 --iters 20000 --timeout-s 18 "$@" \
    >"$work/rtt_$name.txt" 2>&1
  local rc=$?
  echo "$name rc $rc: $(grep summary "$work/rtt_$name.txt" | sed 's/.*client-spin-us [0-9-]* //; s/ | load before.*after/ | load after/')"
  grep -A1 'clients 16' "$work/rtt_$name.txt" | sed 's/^/    /'
}
for rep in 1 2; do
  for s in "50 16" "50 8" "0 16" "50 4"; do
    set -- $s
    rtt "s$1_io$2_r$rep" --spin-us "$1" --client-spin-us "$1" --io-threads "$2"
  done
done
echo "done in $SECONDS s; $(uptime)"
tar -C "$work" -czf "$out/rtt_runs.tgz" .
