#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, the 'fuzz' preset: clang 14, ASan + UBSan) and runs each in turn on a
# scratch copy of its seed corpus (tests/fuzz/corpus/TARGET), one process at a time.
# Usage: scripts/fuzz.sh [--time SECONDS] [--runs N] [--work DIR] [TARGET...]
#   --time S   run each target for at most S seconds (default 25 when --runs is not given)
#   --runs N   run each target for at most N executions
#   --work D   where the grown corpora and crash artifacts go (default build/fuzz/work)
#   TARGET     any of: epk_reader safetensors_reader gguf_reader protocol rans_tile (default: all)
# Exit 1 if any target crashed (its input is under WORK/TARGET/crashes/); libFuzzer's summary of each run is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
all=(epk_reader safetensors_reader gguf_reader protocol rans_tile)
limit=()
work=build/fuzz/work
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --time) limit+=(-max_total_time="$2"); shift 2 ;;
    --runs) limit+=(-runs="$2"); shift 2 ;;
    --work) work="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
[ ${#limit[@]} -gt 0 ] || limit=(-max_total_time=25)

# clang and its libFuzzer/sanitizer runtimes from Debian, as scripts/setup.sh installs the rest.
if ! dpkg -s clang-14 libclang-rt-14-dev >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "fuzz.sh: installing clang-14 libclang-rt-14-dev"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang-14 libclang-rt-14-dev
fi
source scripts/ccache_env.sh
cmake --preset fuzz >/dev/null
cmake --build build/fuzz -j "$(nproc)" --target $(printf '%s_fuzz ' "${targets[@]}")

failed=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t/corpus" "$work/$t/crashes"
  echo "== $t: ${limit[*]}"
  # New inputs go to the scratch corpus (first directory); the committed seeds are only read.
  if ! "build/fuzz/tests/fuzz/${t}_fuzz" "${limit[@]}" -rss_limit_mb=4096 -timeout=20 -print_final_stats=1 \
      -artifact_prefix="$work/$t/crashes/" "$work/$t/corpus" "tests/fuzz/corpus/$t" 2>"$work/$t/log"; then
    failed=1
    echo "$t: CRASHED; input(s) in $work/$t/crashes/, log $work/$t/log"
    grep -E 'ERROR|SUMMARY|runtime error' "$work/$t/log" | head -5 || true
  fi
  grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb)' \
    "$work/$t/log" || true
  grep -E '^#[0-9]+' "$work/$t/log" | tail -1 || true
done
exit $failed
