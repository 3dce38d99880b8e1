#!/bin/bash
# Per-pair costs of the cache-hit acquire + release round trip, counted rather than timed (timings on a shared 2-core
# VM are noise): one client (epk_bench_rtt --socket ... --clients 1) against an epkd with one io thread, no spin.
#
#   scripts/bench/rtt_counts.sh MODE EPKD BENCH ITERS [bench args, e.g. --by-value or --nowait]
#     MODE syscalls: `strace -f -c` of epkd and of the bench (ITERS timed pairs + 201 warm-up pairs); prints both tables
#     MODE instructions: callgrind (valgrind) of both; prints "epkd_Ir client_Ir" summed over each side's processes.
#          Run it at two ITERS (e.g. 1000 and 3000): the difference over the difference of pairs is Ir per pair.
#     MODE allocations: memcheck's "total heap usage" of the bench's processes (the second line is the client).
#          Same two-ITERS difference for allocations per pair.
# Needs strace / valgrind. Paths may be relative to the current directory.
set -u
MODE=$1; EPKD=$2; BENCH=$3; ITERS=$4; shift 4
OUT=$(mktemp -d /tmp/epk_rtt_counts.XXXXXX)
S=$OUT/s.sock
DAEMON_ARGS=(--socket "$S" --budget-mb 64 --cpu --synthetic bench=t0:64x64 --log-level warn --io-threads 1 --spin-us 0)
BENCH_ARGS=(--socket "$S" --model bench --tensor t0 --clients 1 --iters "$ITERS" "$@")
case "$MODE" in
  syscalls)
    strace -f -c -o "$OUT/epkd.txt" "$EPKD" "${DAEMON_ARGS[@]}" 2>/dev/null &
    ;;
  instructions)
    valgrind --tool=callgrind --callgrind-out-file="$OUT/epkd.cg.%p" "$EPKD" "${DAEMON_ARGS[@]}" 2>"$OUT/epkd.log" &
    ;;
  allocations)
    "$EPKD" "${DAEMON_ARGS[@]}" 2>/dev/null &
    ;;
  *) echo "unknown mode $MODE" >&2; exit 2 ;;
esac
SP=$!
for _ in $(seq 600); do [ -S "$S" ] && break; sleep 0.1; done
sleep 0.3
case "$MODE" in
  syscalls) timeout 300 strace -f -c -o "$OUT/client.txt" "$BENCH" "${BENCH_ARGS[@]}" >"$OUT/bench.txt" 2>&1 ;;
  instructions)
    timeout 300 valgrind --tool=callgrind --callgrind-out-file="$OUT/client.cg.%p" "$BENCH" "${BENCH_ARGS[@]}" \
      >"$OUT/bench.txt" 2>"$OUT/client.log" ;;
  allocations) timeout 300 valgrind --log-file="$OUT/mc.%p" "$BENCH" "${BENCH_ARGS[@]}" >"$OUT/bench.txt" 2>&1 ;;
esac
# strace does not pass SIGTERM on to its tracee: signal epkd itself.
if [ "$MODE" = syscalls ]; then kill -TERM "$(pgrep -P "$SP")"; else kill -TERM "$SP"; fi
wait "$SP"
case "$MODE" in
  syscalls) echo "== epkd"; head -12 "$OUT/epkd.txt"; echo "== bench (client)"; head -8 "$OUT/client.txt" ;;
  instructions)
    total() { for f in "$OUT"/$1.cg.*; do grep -h '^summary:\|^totals:' "$f" | head -1 | awk '{print $2}'; done |
                awk '{s += $1} END {print s}'; }
    echo "$(total epkd) $(total client)" ;;
  allocations) grep -h 'total heap usage' "$OUT"/mc.* ;;
esac
grep -h '^acquire' "$OUT/bench.txt"
rm -rf "$OUT"
