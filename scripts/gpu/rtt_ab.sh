#!/usr/bin/env bash
# On the GPU host: cache-hit acquire+release round trips (host pools, 1/4/16 clients, epkd's default io threads and
# spin) of two builds side by side, alternately, REPS times each, so that both see the same machine: A/ and B/ each
# hold epkd, epk_bench_rtt and lib/. Summary lines to stdout, the runs' logs under OUT. RTT_ARGS: more arguments for
# epk_bench_rtt (--device-pool: the GPU's pool instead of host memfds).
#   LIMIT=120 REPS=3 [RTT_ARGS=--device-pool] bash rtt_ab.sh A B [OUT]
set -uo pipefail
a="$1"
b="$2"
shift 2
default_out=/tmp/epk_rtt_ab
default_limit=120
source "$(cd "$(dirname "$0")" && pwd)/run_common.sh" "$b" "$@"
reps="${REPS:-3}"
machine | tee "$out/machine.txt"
for rep in $(seq 1 "$reps"); do
  for side in A B; do
    dir="$a"
    [[ $side == B ]] && dir="$b"
    [[ $(left) -gt 12 ]] || { echo "$side r$rep: skipped (time)"; continue; }
    LD_LIBRARY_PATH="$dir/lib" timeout 20 "$dir/epk_bench_rtt" --epkd "$dir/epkd" --clients 1,4,16 --iters 20000 \
      --timeout-s 18 ${RTT_ARGS:-} >"$out/rtt_${side}_r$rep.txt" 2>&1
    echo "$side r$rep rc $?:"
    grep -E 'acquire\+release clients' "$out/rtt_${side}_r$rep.txt" | sed 's/^/    /' | head -6
  done
done
echo "done in $SECONDS s; $(uptime)"
