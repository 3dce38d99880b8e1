#!/usr/bin/env bash
# On the GPU machine: gpu_acquire_bench (10240x3840 4 bpp, uncached acquire until its event) over the settings that
# matter for the uncached target (spin, client spin, status spin, how misses are released), without and with MPS; then
# the device tests. One summary on stdout; every bench's whole output in OUT/matrix.txt, epkd's timelines in
# OUT/timeline.txt.  bash uncached_matrix.sh BIN [OUT]   (LIMIT seconds, default 240; N tensors per run, default 20)
set -uo pipefail
default_out=/tmp/epk_uncached
default_limit=240
source "$(cd "$(dirname "$0")" && pwd)/run_common.sh" "$@"
n="${N:-20}"
machine
acq() {  # NAME ARGS...
  local name="$1"
  shift
  [[ $(left) -gt 30 ]] || { echo "== $name: skipped (time)"; return; }
  echo "== $name: $*"
  {
    echo "==== $name: $*"
    timeout 40 "$bin/gpu_acquire_bench" --epkd "$bin/epkd" --rows 10240 --cols 3840 --bpp 4 --n "$n" --iters 300 \
      --timeline "$@" 2>"$out/last.err"
    echo "rc $?"
  } >"$out/last.txt"
  cat "$out/last.txt" >>"$out/matrix.txt"
  { echo "==== $name"; grep -h 'timeline slot' "$out/last.err" | sed 's/.*timeline slot/timeline slot/'; } >>"$out/timeline.txt"
  grep -E '^rc|bare|round trip|until event|/ \(bare|client side|stream sync p50|settings|decodes' "$out/last.txt"
}
# No MPS. "def": epkd's default spin (50 us on 16 cores); client spin 0 (its default).
acq A_early_def_event
acq C_early_def_host --miss-release host
acq E_early_def_host_nostatusspin --miss-release host --status-spin-us 0
acq F_early_spin0_host --miss-release host --spin-us 0
acq H_early_spin50_c50_host --miss-release host --spin-us 50 --client-spin-us 50
if [[ $(id -u) == 0 ]] && command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/epk_mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/epk_mps_log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    echo "== MPS on"
    acq M_early_def_event
    acq O_early_def_host --miss-release host
    echo quit | nvidia-cuda-mps-control
    sleep 1
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
fi
rm -f "$out/last.txt" "$out/last.err"
t=$(( $(left) - 5 ))
if [[ $t -gt 20 ]]; then
  echo "== device tests (timeout $t s)"
  export EPK_EPKD="$bin/epkd" EPK_TEST_CLIENT="$bin/epk_test_client" EPK_CLI="$bin/../cli/epk"
  timeout "$t" "$bin/epkd_gpu_test" --gtest_brief=1 >"$out/gpu_test.txt" 2>&1
  echo "epkd_gpu_test rc $?"
  grep -E 'FAILED|PASSED|tests from|Failure' "$out/gpu_test.txt" | tail -12
fi
echo "== done in $SECONDS s"
