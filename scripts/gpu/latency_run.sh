#!/usr/bin/env bash
# On the GPU machine: issue 6's latency figures in one call. BIN is the staged epkd folder
# (stage.sh's .gpu/epkd); results go to OUT (default $OUT, else /tmp/epk_latency), a summary to stdout.
#   1. gpu_acquire_bench (uncached 10240x3840 4 bpp + cache hits) with epkd's per-miss timeline: spin off, then on;
#   2. epk_bench_rtt (host path, 1/4/16 clients): spin off / daemon only / client only / both, and io threads 8, 16;
#   3. the device integration tests (epkd_gpu_check.sh --no-bench) with what time is left.
# Every step has its own timeout and the whole stays under LIMIT seconds (default 280).
#   bash latency_run.sh BIN [OUT]
set -uo pipefail
default_out=/tmp/epk_latency
default_limit=280
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/run_common.sh" "$@"
machine | tee "$out/machine.txt"

acq() {  # NAME ARGS...: one gpu_acquire_bench run
  local name="$1"
  shift
  [[ $(left) -gt 70 ]] || { echo "== $name: skipped (time)"; return; }
  echo "== gpu_acquire_bench $name: $*"
  timeout 65 "$bin/gpu_acquire_bench" --epkd "$bin/epkd" --rows 10240 --cols 3840 --bpp 4 --n 6 --iters 2000 \
    --timeline "$@" >"$out/acq_$name.txt" 2>"$out/acq_$name.err"
  echo "rc $?"
  grep -v '^client timeline' "$out/acq_$name.txt" | tail -14
  grep -h 'client timeline' "$out/acq_$name.txt" | tail -3
  grep -h 'timeline slot' "$out/acq_$name.err" | tail -3 | sed 's/.*timeline slot/timeline slot/'
}
acq base --spin-us 0 --client-spin-us 0
acq spin50 --spin-us 50 --client-spin-us 50

rtt() {  # NAME ARGS...: one epk_bench_rtt run
  local name="$1"
  shift
  [[ $(left) -gt 25 ]] || { echo "== rtt $name: skipped (time)"; return; }
  echo "== epk_bench_rtt $name: $*"
  timeout 30 "$bin/epk_bench_rtt" --epkd "$bin/epkd" --clients 1,4,16 --iters 20000 --timeout-s 28 "$@" \
    >"$out/rtt_$name.txt" 2>&1
  echo "rc $?"
  grep -E 'clients|cpu:|idle|summary' "$out/rtt_$name.txt"
}
rtt off --spin-us 0 --client-spin-us 0
rtt d50 --spin-us 50 --client-spin-us 0
rtt c50 --spin-us 0 --client-spin-us 50
rtt both50 --spin-us 50 --client-spin-us 50
rtt both20 --spin-us 20 --client-spin-us 20
rtt both100 --spin-us 100 --client-spin-us 100
rtt off_io8 --spin-us 0 --client-spin-us 0 --io-threads 8
rtt both50_io8 --spin-us 50 --client-spin-us 50 --io-threads 8
rtt off_io16 --spin-us 0 --client-spin-us 0 --io-threads 16
rtt both50_io16 --spin-us 50 --client-spin-us 50 --io-threads 16

t=$(( $(left) - 5 ))
if [[ $t -gt 20 ]]; then
  echo "== epkd_gpu_check.sh --no-bench (timeout $t s)"
  timeout "$t" bash "$here/epkd_gpu_check.sh" "$bin" --no-bench >"$out/gpu_check.txt" 2>&1
  echo "rc $?"
  tail -25 "$out/gpu_check.txt"
else
  echo "== epkd_gpu_check.sh: skipped (time)"
fi
echo "== done in $SECONDS s"
