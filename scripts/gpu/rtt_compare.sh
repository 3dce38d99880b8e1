#!/usr/bin/env bash
# On the GPU host (rtt branch): cache-hit acquire+release round trips, 1/4/16 clients, epkd with lane locks (the
# default) and with --no-lane-locks (the service lock held for the whole hit, as before), run alternately so that
# both see the same machine. BIN holds epkd, epk_bench_rtt and lib/; results go to OUT, a summary to stdout.
#   LIMIT=150 bash rtt_compare.sh BIN [OUT]
set -uo pipefail
bin="$1"
out="${2:-${OUT:-/tmp/epk_rtt}}"
limit="${LIMIT:-150}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
left() { echo $((limit - SECONDS)); }
{
  date -u
  echo "nproc $(nproc); $(uptime)"
  lscpu | grep -E 'Model name|Thread|Core|Socket' | head -4
} | tee "$out/machine.txt"

rtt() {  # NAME ARGS...: one epk_bench_rtt run
  local name="$1"
  shift
  [[ $(left) -gt 15 ]] || { echo "== rtt $name: skipped (time)"; return; }
  echo "== $name: $*"
  timeout 20 "$bin/epk_bench_rtt" --epkd "$bin/epkd" --clients 1,4,16 --iters 20000 --timeout-s 18 "$@" \
    >"$out/rtt_$name.txt" 2>&1
  echo "rc $?"
  grep -E 'clients|cpu:|summary' "$out/rtt_$name.txt"
}
for rep in 1 2; do
  for s in "50 16" "50 8" "50 4" "0 16"; do
    set -- $s
    rtt "lane_s$1_io$2_r$rep" --spin-us "$1" --client-spin-us "$1" --io-threads "$2"
    rtt "svc_s$1_io$2_r$rep" --spin-us "$1" --client-spin-us "$1" --io-threads "$2" --epkd-flag=--no-lane-locks
  done
done
echo "== done in $SECONDS s; $(uptime)"
