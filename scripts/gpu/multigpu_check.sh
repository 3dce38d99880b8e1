#!/usr/bin/env bash
# On the GPU machine: epkd serving every GPU of the host. Runs the several-device integration test, then the
# one-device one (epkd_gpu_test, --devices 0), against the staged binaries, and shows `epk status` of an epkd on
# every device. BIN is the folder scripts/gpu/stage.sh fills (.gpu/). Exit status 0 when both tests pass.
#   bash multigpu_check.sh BIN
set -uo pipefail
bin="$1"
export LD_LIBRARY_PATH="$bin/epkd/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export EPK_EPKD="$bin/epkd/epkd" EPK_TEST_CLIENT="$bin/epkd/epk_test_client" EPK_CLI="$bin/cli/epk"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader || true
echo "== epkd_multigpu_test"
timeout 100 "$bin/epkd/epkd_multigpu_test" 2>&1 | tail -40
multi_rc=${PIPESTATUS[0]}
echo "== epkd_gpu_test (device 0)"
timeout 80 "$bin/epkd/epkd_gpu_test" --gtest_brief=1 2>&1 | tail -30
single_rc=${PIPESTATUS[0]}
echo "== epk status of an epkd on every device (synthetic model, 64 MiB per device)"
sock="/tmp/mgpu_status.sock"
"$EPK_EPKD" --socket "$sock" --budget-mb 64 --synthetic "m=t0:1024x1024,t1:333x77" --log-level warn &
pid=$!
for _ in $(seq 100); do [[ -S "$sock" ]] && break; sleep 0.1; done
"$EPK_CLI" get --socket "$sock" m t0 -o /tmp/mgpu_t0.safetensors --device 1 || true
"$EPK_CLI" status --socket "$sock" || true
kill -TERM "$pid"; wait "$pid"; echo "epkd exit $?"
echo "== multigpu: epkd_multigpu_test $multi_rc, epkd_gpu_test $single_rc"
[[ "$multi_rc" == 0 && "$single_rc" == 0 ]]
