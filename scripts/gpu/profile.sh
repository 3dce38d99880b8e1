#!/usr/bin/env bash
# On the GPU machine, after gpu_run.sh made the bench streams: instruction counts and issue figures of the kernel the
# decoder's plan takes for each bench tensor (ncu, one launch each; EPK_PROFILE_TENSORS, default the 10240x3840 layer
# at 4 bpp (the lean kernel) and at 8 bpp (the general kernel, two-level tables)), and the SASS of every kernel
# (EPK_PROFILE_SASS= skips it). Output to $OUT (or /tmp/epk_gpu_out).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${EPK_GPU_BIN:-$here/bin}"
out="${OUT:-/tmp/epk_gpu_out}"
streams=/tmp/epk_bench_streams
mkdir -p "$out"
metrics=smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics+=,smsp__warps_eligible.avg.per_cycle_active,smsp__warps_active.avg.per_cycle_active
metrics+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__average_warp_latency_per_inst_issued.ratio
metrics+=,gpu__time_duration.sum
for tensor in ${EPK_PROFILE_TENSORS:-l10240x3840_4bpp l10240x3840_8bpp}; do
  echo "== ncu, $tensor"
  timeout 90 ncu --kernel-name regex:lattice_decode --launch-skip 5 --launch-count 1 --metrics "$metrics" \
    "$bin/gpu_decode_bench" "$streams" --only "$tensor" --runs 3 2>&1 \
    | grep -E "lattice_decode|smsp__|sm__|l1tex__|gpu__|median" | tee -a "$out/ncu.txt"
done
if [[ -z "${EPK_PROFILE_SASS-1}" ]]; then :; elif command -v cuobjdump >/dev/null; then
  cuobjdump -sass "$bin/gpu_decode_bench" > /tmp/all.sass 2>&1
  grep -n "Function :" /tmp/all.sass > "$out/sass_index.txt"
  gzip -c /tmp/all.sass > "$out/all_sass.gz"
fi
