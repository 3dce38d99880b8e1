#!/usr/bin/env bash
# On the GPU machine, from the repository root of the copied tree: issue 32's host tier checked and timed. epkd's
# device tests (scripts/gpu/epkd_gpu_check.sh: among them a model served from epkd's host tier, and client-side
# decode from it), client-side decode from the host tier and epkd's staged decodes under compute-sanitizer memcheck,
# the uncached acquire
# with the tier on the device and in host memory (gpu_acquire_bench --tier-budget-mb 0), the decoder reading a
# tensor's inputs from pinned host memory in place against staged (bench/gpu_decode_bench, after the reference
# streams scripts/gpu/make_bench_streams.py makes), and the package's host-tier tests with torch.
# Usage: bash scripts/gpu/host_tier_check.sh STAGE [OUT]   (STAGE: scripts/gpu/stage.sh's folder)
set -uo pipefail
stage="$(cd "${1:?usage: host_tier_check.sh STAGE [OUT]}" && pwd)"
out="${2:-${OUT:-/tmp/epk-host-tier}}"
mkdir -p "$out"
bin="$stage/epkd"
export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export EPK_EPKD="$bin/epkd" EPK_TEST_CLIENT="$bin/epk_test_client" EPK_CLI="$stage/cli/epk"
rc=0
echo "== epkd's device tests"
bash "$stage/epkd_gpu_check.sh" "$bin" --no-bench > "$out/epkd_tests.txt" 2>&1 || rc=1
tail -4 "$out/epkd_tests.txt"
if command -v compute-sanitizer >/dev/null; then
  echo "== compute-sanitizer: client-side decode from epkd's host tier (the client process only)"
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 --target-processes application-only \
    "$bin/client_decode_gpu_test" --gtest_brief=1 --gtest_filter='*HostTier*' > "$out/sanitizer.txt" 2>&1 || rc=1
  tail -3 "$out/sanitizer.txt"
  echo "== compute-sanitizer: epkd decoding every acquire from its host tier (staged), against a --cpu epkd"
  bash scripts/gpu/epkd_sanitize.sh "$stage" --tier-budget-mb 0 > "$out/epkd_sanitizer.txt" 2>&1 || rc=1
  tail -6 "$out/epkd_sanitizer.txt"
fi
echo "== uncached acquire, 10240x3840 at 4 bpp: the tier on the device, then in host memory"
for tier in -1 0; do
  timeout 120 "$bin/gpu_acquire_bench" --epkd "$bin/epkd" --rows 10240 --cols 3840 --bpp 4 --n 10 --iters 200 \
    --tier-budget-mb "$tier" > "$out/acquire_tier$tier.txt" 2>&1 || rc=1
  echo "-- tier budget $tier"; grep -iE 'uncached|p50' "$out/acquire_tier$tier.txt" | head -6
done
if [[ -x "$stage/bin/gpu_decode_bench" ]]; then
  echo "== decode with inputs in device memory, in pinned host memory in place, and staged"
  streams=/tmp/epk_bench_streams
  mkdir -p "$streams"
  if [[ ! -f "$streams/up14336x4096_4bpp.epkraw" ]]; then
    python3.12 -m pip install --no-deps --no-index --target /tmp/epk-ref-site "$stage"/wheels/entropack-*.whl \
      > /dev/null 2>&1
    PYTHONPATH=/tmp/epk-ref-site:"$stage/py" python3.12 "$stage/py/make_bench_streams.py" "$streams" \
      > "$out/streams.txt" 2>&1 || { rc=1; tail -5 "$out/streams.txt"; }
  fi
  timeout 240 "$stage/bin/gpu_decode_bench" "$streams" --quick > "$out/decode_bench.txt" 2>&1 || rc=1
  grep -E 'inputs|copy alone|stack' "$out/decode_bench.txt"
fi
echo "== the package's host-tier tests (torch)"
PY_INSTALL_ONLY=1 bash scripts/gpu/python_run.sh "$stage" "$out/py" > "$out/py_install.txt" 2>&1 || rc=1
PYTHONPATH=/tmp/epk-pysite timeout 240 python3.12 -m pytest -q -rs client/python/tests/test_torch_host_tier.py \
  client/python/tests/test_stored.py > "$out/pytest.txt" 2>&1 || rc=1
tail -3 "$out/pytest.txt"
echo "== host_tier_check: rc $rc"
exit "$rc"
