#!/usr/bin/env bash
# On the GPU machine: runs the GPU decoder tests (plus compute-sanitizer on a subset), makes reference-compressed
# streams and reference decode timings with the entropack wheel, runs bench/gpu_decode_bench, and prints a short table
# last. Binaries are built elsewhere and carried (scripts/gpu/stage.sh puts them, this script, the Python helpers and
# the committed test vectors into one folder). Results also go to $OUT when it is set.
#   bash .gpu/gpu_run.sh [--quick | --no-sanitizer]   (--quick: no sanitizer, a shorter bench)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${EPK_GPU_BIN:-$here/bin}"
py="${EPK_GPU_PY:-$here/py}"
data="${EPK_TEST_DATA_DIR:-$here/data}"
wheels="${EPK_WHEELS:-$PWD/.whl}"
out="${OUT:-/tmp/epk_gpu_out}"
streams=/tmp/epk_bench_streams
quick="${1:-}"
mkdir -p "$out" "$streams"

echo "== device"
nvidia-smi --format=csv \
  --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total,temperature.gpu,power.draw
echo "== tests"
EPK_TEST_DATA_DIR="$data" "$bin/epk_cuda_decode_test" --gtest_brief=1 2>&1 | tee "$out/test.txt" | tail -25
tests_rc=${PIPESTATUS[0]}
EPK_TEST_DATA_DIR="$data" "$bin/epk_cuda_oracle_test" --gtest_brief=1 2>&1 | tee -a "$out/test.txt" | tail -8
oracle_rc=${PIPESTATUS[0]}
"$bin/epk_cuda_intq_test" --gtest_brief=1 2>&1 | tee -a "$out/test.txt" | tail -8
intq_rc=${PIPESTATUS[0]}
# The device encoder against the CPU encoder, byte for byte (scripts/gpu/encode_run.sh adds its bench).
"$bin/epk_cuda_encode_test" --gtest_brief=1 2>&1 | tee -a "$out/test.txt" | tail -8
encode_rc=${PIPESTATUS[0]}
"$bin/epk_cuda_encode_copy_test" --gtest_brief=1 2>&1 | tee -a "$out/test.txt" | tail -8
[[ ${PIPESTATUS[0]} == 0 ]] || encode_rc=1
sanitizer_rc=skipped
if [[ "$quick" != "--quick" && "$quick" != "--no-sanitizer" ]] && command -v compute-sanitizer >/dev/null; then
  echo "== compute-sanitizer"
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/epk_cuda_intq_test" --gtest_brief=1 2>&1 \
    | tail -3
  s1=${PIPESTATUS[0]}
  EPK_TEST_DATA_DIR="$data" timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$bin/epk_cuda_decode_test" --gtest_brief=1 --gtest_filter='GpuCorruption.*:GpuRowRange.*:GpuBatch.*' 2>&1 | tail -4
  s2=${PIPESTATUS[0]}
  EPK_TEST_DATA_DIR="$data" timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 \
    "$bin/epk_cuda_decode_test" --gtest_brief=1 --gtest_filter='GpuCorruption.AFlipped*' 2>&1 | tail -3
  s3=${PIPESTATUS[0]}
  sanitizer_rc=$(( s1 | s2 | s3 ))
fi
echo "== device pool: CUDA VMM allocation exported as a POSIX fd, imported by a second process"
pool_rc=na
cli_rc=na
if [[ -x "$bin/shm_device_pool_test" ]]; then
  "$bin/shm_device_pool_test" --gtest_brief=1 2>&1 | tee "$out/pool.txt" | tail -8
  pool_rc=${PIPESTATUS[0]}
fi
echo "== epk decompress/verify --device cuda against --device cpu"
if [[ -d "$here/cli" ]]; then
  timeout 300 bash "$here/cli_cuda_check.sh" "$here/cli" 2>&1 | tee "$out/cli.txt" | tail -40
  cli_rc=${PIPESTATUS[0]}
fi
epkd_rc=na
if [[ -d "$here/epkd" ]]; then
  bash "$here/epkd_gpu_check.sh" "$here/epkd" 2>&1 | tee "$out/epkd_gpu.txt" | tail -80
  epkd_rc=${PIPESTATUS[0]}
fi
rtt_rc=na
if [[ -x "$here/epkd/epk_bench_rtt" ]]; then
  # Issue 6's cache-hit target on the host path, on a machine with cores for 16 clients plus epkd (the bench starts
  # its own epkd with --cpu and a synthetic model).
  echo "== epkd host path: cache-hit acquire + release round trips, $(nproc) cores"
  LD_LIBRARY_PATH="$here/epkd/lib" timeout 200 "$here/epkd/epk_bench_rtt" --epkd "$here/epkd/epkd" --clients 1,4,16 \
    --iters 20000 --timeout-s 90 2>&1 | tee "$out/rtt.txt" | tail -12
  rtt_rc=${PIPESTATUS[0]}
  LD_LIBRARY_PATH="$here/epkd/lib" timeout 200 "$here/epkd/epk_bench_rtt" --epkd "$here/epkd/epkd" --clients 1,4,16 \
    --iters 20000 --nowait --timeout-s 90 2>&1 | tee -a "$out/rtt.txt" | tail -12
fi
echo "== reference streams and reference decode times"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  "$wheels"/*.whl && export PYTHONPATH=/tmp/site
PYTHONUNBUFFERED=1 timeout 300 python3 "$py/make_bench_streams.py" "$streams" 2>&1 | grep -v Warning \
  | tee "$out/reference.txt"
echo "== bench"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 250 \
  > "$out/clocks.csv" 2>&1 &
smi_pid=$!
bench_flags=""
[[ "$quick" == "--quick" ]] && bench_flags="--quick"
"$bin/gpu_decode_bench" "$streams" --runs ${EPK_BENCH_RUNS:-200} $bench_flags 2>&1 | tee "$out/bench.txt"
kill "$smi_pid" 2>/dev/null
clocks="$(awk -F', ' 'NR>1 {print $2}' "$out/clocks.csv" | sort -n | uniq -c | sort -rn | head -4 | tr '\n' ' ')"
echo "SM clock during the bench (samples x clock): $clocks"
echo "== intq repack bench (4096 x 14336 and 14336 x 4096, 4-bit g128)"
"$bin/intq_repack_bench" --rows 4096 --cols 14336 --runs 100 2>&1 | tee "$out/intq_bench.txt"
"$bin/intq_repack_bench" --rows 14336 --cols 4096 --runs 100 2>&1 | tee -a "$out/intq_bench.txt"
echo "== test exit codes: decoder $tests_rc, oracle $oracle_rc, intq $intq_rc, encoder $encode_rc, device pool $pool_rc," \
  "sanitizers $sanitizer_rc, epk --device cuda $cli_rc, epkd device path $epkd_rc, epkd round trips $rtt_rc"
for rc in "$tests_rc" "$oracle_rc" "$intq_rc" "$encode_rc" "$pool_rc" "$sanitizer_rc" "$cli_rc" "$epkd_rc" "$rtt_rc"; do
  [[ "$rc" == 0 || "$rc" == na || "$rc" == skipped ]] || exit 1
done
