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
cp "$build/tests/codec/cuda/epk_cuda_intq_test" "$build/bench/intq_repack_bench" "$dest/bin/"
cp "$root/scripts/gpu_run.sh" "$root/scripts/gpu/profile.sh" "$dest/"
cp "$root/scripts/gpu/make_bench_streams.py" "$root/scripts/testdata/epkraw.py" "$dest/py/"
cp -r "$root/tests/data/cuda" "$dest/data/"
du -sh "$dest"
