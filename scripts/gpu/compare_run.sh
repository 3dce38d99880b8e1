#!/usr/bin/env bash
# On the GPU machine, from the repository root: the same benchmarks from two builds side by side in one call, for a
# change that must keep the speed (issue 12's acceptance): the 10240x3840 4 bpp decode and the 8B-class stack
# (gpu_decode_bench on reference-made streams), the uncached device acquire and the cache-hit p50/p99
# (gpu_acquire_bench). Each build's folder holds gpu_decode_bench, gpu_acquire_bench, epkd, epk_test_client and lib/;
# the runs alternate (before, after, before, after) so that clock drift falls on both.
# Usage: bash scripts/gpu/compare_run.sh BEFORE_DIR AFTER_DIR [ROUNDS (default 2)]
#   WHEEL: the reference package's wheel (default: the first entropack-*.whl under the two folders or .whl/)
set -uo pipefail
[[ $# -ge 2 ]] || { sed -n '2,9p' "$0"; exit 2; }
before="$(cd "$1" && pwd)"
after="$(cd "$2" && pwd)"
rounds="${3:-2}"
streams=/tmp/epk_compare_streams
log=/tmp/epk_compare.log
: > "$log"
wheel="${WHEEL:-$(ls "$before"/entropack-*.whl "$after"/entropack-*.whl .whl/entropack-*.whl 2>/dev/null | head -1)}"
[[ -f "$wheel" ]] || { echo "compare_run: no entropack wheel (set WHEEL)" >&2; exit 1; }
# A pure-Python wheel extracted onto PYTHONPATH is installed (the system python there is externally managed).
python3 -m zipfile -e "$wheel" /tmp/epk_compare_site
stack=q4096x4096_4bpp,k1024x4096_4bpp,v1024x4096_4bpp,o4096x4096_4bpp,gate14336x4096_4bpp,up14336x4096_4bpp
stack+=,down4096x14336_4bpp
PYTHONPATH=/tmp/epk_compare_site PYTHONUNBUFFERED=1 timeout 200 python3 scripts/gpu/make_bench_streams.py "$streams" \
  --only "l10240x3840_4bpp,$stack" 2>&1 | grep -v Warning | tail -3
for ((k = 1; k <= rounds; ++k)); do
  for side in before after; do
    dir=$before
    [[ $side == after ]] && dir=$after
    echo "== $side, round $k: gpu_decode_bench"
    timeout 120 "$dir/gpu_decode_bench" "$streams" --runs "${EPK_BENCH_RUNS:-200}" 2>&1 \
      | grep -E "^l10240x3840_4bpp .*bf16|^stack" | sed "s/^/RESULT $side /" | tee -a "$log"
    echo "== $side, round $k: gpu_acquire_bench"
    LD_LIBRARY_PATH="$dir/lib" EPK_TEST_CLIENT="$dir/epk_test_client" timeout 150 "$dir/gpu_acquire_bench" \
      --epkd "$dir/epkd" --rows 10240 --cols 3840 --bpp 4 --n 10 --iters 2000 2>&1 \
      | grep -E "^bare|^uncached acquire until|^cache-hit" | sed "s/^/RESULT $side /" | tee -a "$log"
  done
done
echo "== table"
sort -s -k3,3 "$log" | grep RESULT
