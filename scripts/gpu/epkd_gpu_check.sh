#!/usr/bin/env bash
# On the GPU machine: epkd's device path. Runs the device integration tests against the staged epkd and test client,
# then the acquire bench (uncached 10240x3840 4 bpp acquire until its event, bare kernel, round trip, cache-hit
# p50/p99 for 1 and 16 clients), without and (as root, where MPS is installed) with CUDA MPS. BIN holds epkd,
# epk_test_client, epkd_gpu_test, gpu_acquire_bench and lib/ (shared libraries the device image may lack). Exit
# status: the tests', or the bench's if the tests passed.
#   bash epkd_gpu_check.sh BIN [--no-bench]
set -uo pipefail
bin="$1"
export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export EPK_EPKD="$bin/epkd" EPK_TEST_CLIENT="$bin/epk_test_client"
export EPK_CLI="${EPK_CLI:-$bin/../cli/epk}"  # stage.sh puts the CLI there; the epk get/status test skips without it
echo "== epkd device path: tests"
timeout 240 "$bin/epkd_gpu_test" --gtest_brief=1 2>&1 | tail -60
test_rc=${PIPESTATUS[0]}
for t in epkd_gpu_intq_test epkd_shard_gpu_test; do  # intq kernels and shards against the CPU path's bytes
  if [[ -x "$bin/$t" ]]; then
    timeout 120 "$bin/$t" --gtest_brief=1 2>&1 | tail -10
    [[ ${PIPESTATUS[0]} == 0 ]] || test_rc=1
  fi
done
if [[ -x "$bin/client_decode_gpu_test" ]]; then  # client-side decode against the device path's bytes
  timeout 100 "$bin/client_decode_gpu_test" --gtest_brief=1 2>&1 | tail -10
  [[ ${PIPESTATUS[0]} == 0 ]] || test_rc=1
fi
if [[ -x "$bin/epkd_multigpu_test" ]]; then  # its second-device cases skip on a one-GPU machine
  timeout 100 "$bin/epkd_multigpu_test" --gtest_brief=1 2>&1 | tail -10
  [[ ${PIPESTATUS[0]} == 0 ]] || test_rc=1
fi
if [[ -x "$bin/shm_cuda_event_test" ]]; then
  timeout 60 "$bin/shm_cuda_event_test" --gtest_brief=1 2>&1 | tail -10
  [[ ${PIPESTATUS[0]} == 0 ]] || test_rc=1
fi
bench_rc=skipped
if [[ "${2:-}" != "--no-bench" ]]; then
  bench() {  # ARGS...: one bench run, its rc into bench_rc when it failed
    echo "== epkd device path: gpu_acquire_bench --rows 10240 --cols 3840 --bpp 4 --n ${EPK_BENCH_N:-10} $*"
    timeout 120 "$bin/gpu_acquire_bench" --epkd "$bin/epkd" --rows 10240 --cols 3840 --bpp 4 --n "${EPK_BENCH_N:-10}" \
      --iters "${EPK_BENCH_ITERS:-2000}" "$@" 2>&1 | grep -v '^client timeline'
    local rc=${PIPESTATUS[0]}
    [[ $rc == 0 ]] || bench_rc=$rc
  }
  bench_rc=0
  bench
  # The same bench under CUDA MPS (without it the GPU time-slices between epkd's and
  # the client's contexts). Needs root; MPS is stopped again afterwards whatever happens.
  if [[ $(id -u) == 0 ]] && command -v nvidia-cuda-mps-control >/dev/null; then
    echo "== epkd device path under MPS: gpu_acquire_bench --rows 10240 --cols 3840 --bpp 4"
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/epk_mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/epk_mps_log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d; then
      echo "(under MPS)"
      bench
      echo quit | nvidia-cuda-mps-control
      sleep 1
    fi
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  fi
fi
echo "== epkd device path: test $test_rc, bench $bench_rc"
[[ "$test_rc" == 0 ]] || exit 1
[[ "$bench_rc" == 0 || "$bench_rc" == skipped ]] || exit 1
