#!/usr/bin/env bash
# Here (the build machine): copies what scripts/gpu/encode_run.sh needs into DEST (stripped binaries, the run
# script, the reference bench and, when given as EPK_REF_WHEEL, the reference package's wheel).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dest="${1:?usage: encode_stage.sh DEST}"
build="${EPK_BUILD_DIR:-$root/build/default}"
mkdir -p "$dest/bin" "$dest/cli" "$dest/py"
strip -o "$dest/bin/epk_cuda_encode_test" "$build/tests/codec/cuda/epk_cuda_encode_test"
strip -o "$dest/bin/epk_cuda_encode_copy_test" "$build/tests/codec/cuda/epk_cuda_encode_copy_test"
strip -o "$dest/bin/gpu_encode_bench" "$build/bench/gpu_encode_bench"
strip -o "$dest/cli/epk" "$build/tools/epk/epk"
strip -o "$dest/cli/make_demo_model" "$build/tools/demo/make_demo_model"
cp "$root/scripts/gpu/encode_run.sh" "$dest/"
cp "$root/scripts/gpu/ref_encode_bench.py" "$dest/py/"
if [[ -n "${EPK_REF_WHEEL:-}" ]]; then cp "$EPK_REF_WHEEL" "$dest/py/"; fi
du -sh "$dest"
