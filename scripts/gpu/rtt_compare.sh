#!/usr/bin/env bash
# On the GPU host (rtt branch): cache-hit acquire+release round trips, 1/4/16 clients, epkd in its three hit-path
# modes, run alternately so that all see the same machine: shared (the default: lane locks with a shared side),
# excl (--no-shared-hits: the lane lock exclusive on every hit) and svc (--no-lane-locks: the service lock held for
# the whole hit, as before the rtt branch). BIN holds epkd, epk_bench_rtt and lib/; every output goes to OUT (one tar),
# the summary lines to stdout.
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
    rtt "shared_s$1_io$2_r$rep" --spin-us "$1" --client-spin-us "$1" --io-threads "$2"
    rtt "excl_s$1_io$2_r$rep" --spin-us "$1" --client-spin-us "$1" --io-threads "$2" --epkd-flag=--no-shared-hits
    rtt "svc_s$1_io$2_r$rep" --spin-us "$1" --client-spin-us "$1" --io-threads "$2" --epkd-flag=--no-lane-locks
  done
done
echo "done in $SECONDS s; $(uptime)"
tar -C "$work" -czf "$out/rtt_runs.tgz" .
