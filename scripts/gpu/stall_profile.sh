#!/usr/bin/env bash
# On the GPU machine: where the decode kernel's warps wait, per SASS instruction (ncu warp-state sampling and source
# counters, clocks left alone) on one bench tensor. Needs the bench streams (make_bench_streams.py [--only NAME]).
#   bash scripts/gpu/stall_profile.sh NAME:FLAGS...   e.g. "lean:--lean 1" "ws:--lean 1 --ws 1"
# For each variant: $OUT/stall_NAME.txt (details page: stall reasons, scheduler, issue) and $OUT/stall_NAME.csv
# (source page: samples and instructions per SASS line). bin: EPK_GPU_BIN (default: bin/ beside this script where
# scripts/gpu/stage.sh put it, else .gpu/bin), tensor:
# EPK_PROFILE_TENSOR (default l10240x3840_4bpp), streams: EPK_STREAMS (default /tmp/epk_bench_streams).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${EPK_GPU_BIN:-$([[ -d "$here/bin" ]] && echo "$here/bin" || echo "$PWD/.gpu/bin")}"
out="${OUT:-/tmp/epk_gpu_out}"
streams="${EPK_STREAMS:-/tmp/epk_bench_streams}"
tensor="${EPK_PROFILE_TENSOR:-l10240x3840_4bpp}"
mkdir -p "$out"
for variant in "$@"; do
  name="${variant%%:*}"
  read -r -a flags <<<"${variant#*:}"
  echo "== ncu stall sampling: $name (${flags[*]})"
  timeout 240 ncu --clock-control none --kernel-name regex:lattice_decode --launch-skip 3 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SchedulerStats --section LaunchStats \
    --section Occupancy -f -o "/tmp/stall_$name" \
    "$bin/gpu_decode_bench" "$streams" --only "$tensor" "${flags[@]}" --runs 3 2>&1 | tail -3
  ncu -i "/tmp/stall_$name.ncu-rep" --page details >"$out/stall_$name.txt" 2>&1
  ncu -i "/tmp/stall_$name.ncu-rep" --page source --csv --print-source sass >"$out/stall_$name.csv" 2>&1 ||
    ncu -i "/tmp/stall_$name.ncu-rep" --page source --csv >"$out/stall_$name.csv" 2>&1
  grep -iE "stall|issue|eligible|active|Duration" "$out/stall_$name.txt" | head -60
done
