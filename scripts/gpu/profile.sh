#!/usr/bin/env bash
# On the GPU machine, after gpu_run.sh made the bench streams: instruction counts and issue figures of the decode
# kernel on the 10240x3840 4 bpp layer (ncu, one launch each: fast_groups 0 1 2 or EPK_PROFILE_FAST, then the lean
# loop and its warp-specialised form),
# and the SASS of every kernel (EPK_PROFILE_SASS= skips it). Output to $OUT (or /tmp/epk_gpu_out).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${EPK_GPU_BIN:-$here/bin}"
out="${OUT:-/tmp/epk_gpu_out}"
streams=/tmp/epk_bench_streams
metrics=smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics+=,smsp__warps_eligible.avg.per_cycle_active,smsp__warps_active.avg.per_cycle_active
metrics+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__average_warp_latency_per_inst_issued.ratio
metrics+=,gpu__time_duration.sum
for fast in ${EPK_PROFILE_FAST:-0 1 2}; do
  echo "== ncu, fast_groups $fast"
  timeout 90 ncu --kernel-name regex:lattice_decode --launch-skip 5 --launch-count 1 --metrics "$metrics" \
    "$bin/gpu_decode_bench" "$streams" --only l10240x3840_4bpp --fast "$fast" --runs 3 2>&1 \
    | grep -E "lattice_decode|smsp__|sm__|l1tex__|gpu__" | tee -a "$out/ncu.txt"
done
echo "== ncu, lean"
timeout 90 ncu --kernel-name regex:lattice_decode --launch-skip 5 --launch-count 1 --metrics "$metrics" \
  "$bin/gpu_decode_bench" "$streams" --only l10240x3840_4bpp --lean 1 --runs 3 2>&1 \
  | grep -E "lattice_decode|smsp__|sm__|l1tex__|gpu__" | tee -a "$out/ncu.txt"
echo "== ncu, warp-specialised lean"
timeout 90 ncu --kernel-name regex:lattice_decode --launch-skip 5 --launch-count 1 --metrics "$metrics" \
  "$bin/gpu_decode_bench" "$streams" --only l10240x3840_4bpp --lean 1 --ws 1 --runs 3 2>&1 \
  | grep -E "lattice_decode|smsp__|sm__|l1tex__|gpu__" | tee -a "$out/ncu.txt"
if [[ -z "${EPK_PROFILE_SASS-1}" ]]; then :; elif command -v cuobjdump >/dev/null; then
  cuobjdump -sass "$bin/gpu_decode_bench" > /tmp/all.sass 2>&1
  grep -n "Function :" /tmp/all.sass > "$out/sass_index.txt"
  gzip -c /tmp/all.sass > "$out/all_sass.gz"
fi
