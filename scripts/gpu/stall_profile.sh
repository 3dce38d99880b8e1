#!/usr/bin/env bash
# On the GPU machine: where the decode kernel's warps wait, per SASS instruction (ncu warp-state sampling and source
# counters, clocks left alone), for the kernel the decoder's plan takes on each bench tensor named. Needs the bench
# streams (make_bench_streams.py [--only NAME]).
#   bash scripts/gpu/stall_profile.sh [TENSOR...]   (default l10240x3840_4bpp)
# For each tensor: $OUT/stall_TENSOR.txt (details page: stall reasons, scheduler, issue) and $OUT/stall_TENSOR.csv
# (source page: samples and instructions per SASS line). bin: EPK_GPU_BIN (default: bin/ beside this script where
# scripts/gpu/stage.sh put it, else .gpu/bin), streams: EPK_STREAMS (default /tmp/epk_bench_streams).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${EPK_GPU_BIN:-$([[ -d "$here/bin" ]] && echo "$here/bin" || echo "$PWD/.gpu/bin")}"
out="${OUT:-/tmp/epk_gpu_out}"
streams="${EPK_STREAMS:-/tmp/epk_bench_streams}"
mkdir -p "$out"
for tensor in "${@:-l10240x3840_4bpp}"; do
  echo "== ncu stall sampling: $tensor"
  timeout 240 ncu --clock-control none --kernel-name regex:lattice_decode --launch-skip 3 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SchedulerStats --section LaunchStats \
    --section Occupancy -f -o "/tmp/stall_$tensor" \
    "$bin/gpu_decode_bench" "$streams" --only "$tensor" --runs 3 2>&1 | tail -3
  ncu -i "/tmp/stall_$tensor.ncu-rep" --page details >"$out/stall_$tensor.txt" 2>&1
  ncu -i "/tmp/stall_$tensor.ncu-rep" --page source --csv --print-source sass >"$out/stall_$tensor.csv" 2>&1 ||
    ncu -i "/tmp/stall_$tensor.ncu-rep" --page source --csv >"$out/stall_$tensor.csv" 2>&1
  grep -iE "stall|issue|eligible|active|Duration" "$out/stall_$tensor.txt" | head -60
done
