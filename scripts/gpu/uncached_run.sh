#!/usr/bin/env bash
# On the GPU machine: the uncached device acquire in one call. BIN is the staged epkd folder (stage.sh's
# .gpu_NAME/epkd); logs go to OUT (default $OUT, else /tmp/epk_uncached), a summary to stdout.
#   1. epkd_gpu_check.sh BIN: the device tests, then gpu_acquire_bench without and with MPS;
#   2. gpu_acquire_bench --timeline (epkd's per-miss timeline): at spin 0 (the GPU worker and io threads sleep at
#      once), at spin 50 with a spinning client, and at spin 50 with host-fence releases of the misses.
# Every step has its own timeout and the whole stays under LIMIT seconds (default 240).
#   bash uncached_run.sh BIN [OUT]
set -uo pipefail
default_out=/tmp/epk_uncached
default_limit=240
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/run_common.sh" "$@"
machine | tee "$out/machine.txt"

echo "== epkd_gpu_check.sh (tests + bench, without and with MPS)"
timeout $(( $(left) - 60 )) bash "$here/epkd_gpu_check.sh" "$bin" >"$out/gpu_check.txt" 2>&1
echo "rc $?"
grep -vE '^\[ +(RUN|OK) ' "$out/gpu_check.txt" | grep -vE '^$' | tail -90

acq() {  # NAME ARGS...: one gpu_acquire_bench run with epkd's timeline
  local name="$1"
  shift
  [[ $(left) -gt 25 ]] || { echo "== $name: skipped (time)"; return; }
  echo "== gpu_acquire_bench --timeline $name: $*"
  timeout 40 "$bin/gpu_acquire_bench" --epkd "$bin/epkd" --rows 10240 --cols 3840 --bpp 4 --n "${EPK_BENCH_N:-10}" --iters 300 \
    --timeline "$@" >"$out/acq_$name.txt" 2>"$out/acq_$name.err"
  echo "rc $?"
  grep -E 'bare|round trip|uncached|settings|decodes' "$out/acq_$name.txt"
  grep -h 'client timeline' "$out/acq_$name.txt" | tail -4
  grep -h 'timeline slot' "$out/acq_$name.err" | tail -4 | sed 's/.*timeline slot/timeline slot/'
}
acq early0 --spin-us 0 --client-spin-us 0
acq early50 --spin-us 50 --client-spin-us 50
acq early50_hostrel --spin-us 50 --client-spin-us 50 --miss-release host
echo "== done in $SECONDS s"
