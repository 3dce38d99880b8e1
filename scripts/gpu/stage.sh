#!/usr/bin/env bash
# Here (the build machine): copies what scripts/gpu_run.sh needs into DEST (default: the main checkout's .gpu/,
# ignored there), for the device tool to carry: binaries, the run script, Python helpers, committed test vectors.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dest="${1:-/work/main/.gpu}"
build="${EPK_BUILD_DIR:-$root/build/default}"
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/py" "$dest/data"
cp "$build/tests/codec/cuda/epk_cuda_decode_test" \
  "$build/tests/codec/cuda/epk_cuda_oracle_test" \
  "$build/bench/gpu_decode_bench" "$dest/bin/"
# The CLI's --device cuda check and the device-pool test travel too (stripped: the carry limit is 64 MiB).
mkdir -p "$dest/cli"
strip -o "$dest/cli/epk" "$build/tools/epk/epk"
strip -o "$dest/cli/make_demo_model" "$build/tools/demo/make_demo_model"
strip -o "$dest/bin/shm_device_pool_test" "$build/tests/shm/shm_device_pool_test"
cp "$root/scripts/gpu_run.sh" "$root/scripts/gpu/profile.sh" "$root/scripts/gpu/cli_cuda_check.sh" "$dest/"
cp "$build/tests/codec/cuda/epk_cuda_intq_test" "$build/bench/intq_repack_bench" "$dest/bin/"
cp "$root/scripts/gpu/make_bench_streams.py" "$root/scripts/testdata/epkraw.py" "$dest/py/"
cp -r "$root/tests/data/cuda" "$dest/data/"
# Debug info is not needed there and would overrun the 64 MiB the device tool carries.
strip "$dest"/bin/*
du -sh "$dest"
