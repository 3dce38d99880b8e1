#!/usr/bin/env bash
# Here (the build machine): copies what scripts/gpu_run.sh needs into DEST (default: the main checkout's .gpu/,
# ignored there), for the device tool to carry: binaries, the run script, Python helpers, committed test vectors.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dest="${1:-/work/main/.gpu}"
build="${EPK_BUILD_DIR:-$root/build/default}"
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/py" "$dest/data"
# EPK_STAGE_EPKD_ONLY=1: only epkd's device path (the daemon, its tests and benches, the CLI for the epk get test,
# what host_tier_check.sh runs) and the latency script; the codec's CUDA tests are left out.
if [[ "${EPK_STAGE_EPKD_ONLY:-0}" != 1 ]]; then
  cp "$build/tests/codec/cuda/epk_cuda_decode_test" \
    "$build/tests/codec/cuda/epk_cuda_oracle_test" \
    "$build/bench/gpu_decode_bench" "$dest/bin/"
  # The CLI's --device cuda check and the device-pool test travel too (stripped: the carry limit is 64 MiB).
  mkdir -p "$dest/cli"
  strip -o "$dest/cli/epk" "$build/tools/epk/epk"
  strip -o "$dest/cli/make_demo_model" "$build/tools/demo/make_demo_model"
  strip -o "$dest/bin/shm_device_pool_test" "$build/tests/shm/shm_device_pool_test"
  cp "$root/scripts/gpu_run.sh" "$root/scripts/gpu/profile.sh" "$root/scripts/gpu/stall_profile.sh" \
    "$root/scripts/gpu/cli_cuda_check.sh" "$dest/"
  cp "$build/tests/codec/cuda/epk_cuda_intq_test" "$build/bench/intq_repack_bench" "$dest/bin/"
  cp "$build/tests/codec/cuda/epk_cuda_encode_test" "$build/tests/codec/cuda/epk_cuda_encode_copy_test" \
    "$build/bench/gpu_encode_bench" "$dest/bin/"
  cp "$root/scripts/gpu/make_bench_streams.py" "$root/scripts/testdata/epkraw.py" "$dest/py/"
  cp -r "$root/tests/data/cuda" "$dest/data/"
else
  # With the decode bench and its stream maker, and make_demo_model for epkd_sanitize.sh: what
  # scripts/gpu/host_tier_check.sh runs; and the device encoder's test (both stream profiles: `epk compress` encodes
  # on the GPU where there is one).
  mkdir -p "$dest/cli"
  strip -o "$dest/cli/epk" "$build/tools/epk/epk"
  strip -o "$dest/cli/make_demo_model" "$build/tools/demo/make_demo_model"
  strip -o "$dest/bin/gpu_decode_bench" "$build/bench/gpu_decode_bench"
  strip -o "$dest/bin/epk_cuda_encode_test" "$build/tests/codec/cuda/epk_cuda_encode_test"
  cp "$root/scripts/gpu/make_bench_streams.py" "$root/scripts/testdata/epkraw.py" "$dest/py/"
fi
# epkd's device path (issue 6): the daemon, a client process, the device integration test and the acquire bench, with
# the one shared library epkd needs beyond libc/libstdc++ (the device image may lack it).
mkdir -p "$dest/epkd/lib"
for b in daemon/epkd tests/client/epk_test_client tests/daemon/epkd_gpu_test tests/daemon/epkd_gpu_intq_test tests/daemon/epkd_multigpu_test \
  tests/daemon/client_decode_gpu_test tests/daemon/epkd_shard_gpu_test tests/shm/shm_cuda_event_test bench/gpu_acquire_bench \
  bench/gpu_intq_acquire_bench bench/epk_bench_rtt; do
  strip -o "$dest/epkd/$(basename "$b")" "$build/$b"
done
cp -L "$(ldd "$build/daemon/epkd" | awk '/libtomlplusplus/ {print $3}')" "$dest/epkd/lib/"
# libepk.so.2: the cold-start bench attaches through its C ABI (bench/coldstart/coldstart_bench.py).
strip -o "$dest/epkd/libepk.so.2" "$build/client/libepk.so.2"
cp "$root/scripts/gpu/epkd_gpu_check.sh" "$root/scripts/gpu/latency_run.sh" "$root/scripts/gpu/multigpu_check.sh" \
  "$root/scripts/gpu/uncached_run.sh" "$root/scripts/gpu/uncached_matrix.sh" "$root/scripts/gpu/rtt_compare.sh" \
  "$root/scripts/gpu/run_common.sh" "$dest/"
# Issue 16's cold-start and attach benchmarks (scripts/gpu/coldstart_run.sh): the attach model's writer and the script.
strip -o "$dest/bin/epk_replicate_layers" "$build/bench/epk_replicate_layers"
cp "$root/scripts/gpu/coldstart_run.sh" "$dest/"
# Wheels the GPU machine lacks (it has no package registry): whatever the repository's ignored .whl/ holds, e.g.
# `pip download --no-deps -d .whl diffusers fastsafetensors runai-model-streamer humanize` for the diffusers test of
# scripts/gpu/python_run.sh and the loaders of coldstart_run.sh.
if compgen -G "$root/.whl/*.whl" > /dev/null; then mkdir -p "$dest/wheels" && cp "$root"/.whl/*.whl "$dest/wheels/"; fi
# Debug info is not needed there and would overrun the 64 MiB the device tool carries.
if compgen -G "$dest/bin/*" >/dev/null; then strip "$dest"/bin/*; fi
# The Python package builds on the GPU machine from the copied tree (scripts/gpu/python_run.sh); cuda.h (types only)
# travels in case that machine has no toolkit headers.
if [[ -f /usr/local/cuda/include/cuda.h ]]; then mkdir -p "$dest/include" && cp /usr/local/cuda/include/cuda.h "$dest/include/"; fi
du -sh "$dest"
