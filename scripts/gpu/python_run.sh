#!/usr/bin/env bash
# On the GPU machine, from the repository root of the copied tree: builds and installs the epk Python package from
# the tree without network (nanobind and scikit-build-core already installed there), then runs the package's tests
# against the staged epkd and epk (scripts/gpu/stage.sh STAGE here first): the CUDA ones (zero-copy device leases,
# the decode wait in __dlpack__, the release fence) and the model ones (a Llama-shaped model through
# epk.torch.attach / load, a diffusers transformer, sentence-transformers all-MiniLM-L6-v2, CUDA-graph capture), with
# their printed figures.
# Usage: bash scripts/gpu/python_run.sh STAGE [OUT]   (STAGE: the staged folder, e.g. .gpu; OUT: logs, default $OUT;
# STAGE/wheels/*.whl, if any, are installed first: stage.sh copies the repository's .whl/ there; PY_INSTALL_ONLY=1
# installs and stops)
set -euo pipefail
cd "$(dirname "$0")/../.."
stage="$(cd "$1" && pwd)"
out="${2:-${OUT:-/tmp/epk-python-run}}"
mkdir -p "$out"
py="${PYTHON:-python3.12}"
export LD_LIBRARY_PATH="$stage/epkd/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export EPK_EPKD="$stage/epkd/epkd" EPK_CLI="$stage/cli/epk"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -2 || true
  "$py" -c 'import sys, torch, transformers as t; print(sys.version.split()[0], "torch", torch.__version__,
            "cuda", torch.version.cuda, "transformers", t.__version__)' || true
  cmake --version 2>/dev/null | head -1 || "$py" -c 'import cmake; print("cmake (PyPI)", cmake.__version__)' || true
} 2>&1 | tee "$out/machine.txt"
# cuda.h (types only; the driver is loaded at run time): the toolkit's, CUDA_HOME's, the nvidia-* wheels' beside
# torch, or the copy stage.sh puts in STAGE/include. EPK_PY_CUDA=ON makes a missing header an error, and
# EPK_PY_CLIENT_DECODE=ON a package without client-side decode (nvcc, nlohmann-json, libxxhash: client/python's
# CMakeLists.txt).
if [ -z "${CUDA_HOME:-}" ] && [ ! -f /usr/local/cuda/include/cuda.h ] && [ -f "$stage/include/cuda.h" ]; then
  export CUDA_HOME="$stage"
fi
"$py" -c 'import nanobind, scikit_build_core, numpy, pytest' || {
  echo "python_run: $py needs nanobind, scikit-build-core, numpy and pytest installed (no network here)" >&2; exit 1; }
# Into a folder of its own on PYTHONPATH, with the machine's python itself: a venv would not see packages installed in
# the user's site (scikit-build-core is one there), and the build runs without isolation (no network).
site=/tmp/epk-pysite
rm -rf "$site"
EPK_PY_CUDA=ON EPK_PY_CLIENT_DECODE=ON "$py" -m pip install --no-build-isolation --no-deps --no-index --target "$site" -v ./client/python \
  > "$out/pip_install.log" 2>&1 || { tail -40 "$out/pip_install.log"; exit 1; }
# Wheels the GPU machine lacks (pure-Python ones such as diffusers), carried in STAGE/wheels, go beside the package.
if compgen -G "$stage/wheels/*.whl" > /dev/null; then
  "$py" -m pip install --no-deps --no-index --target "$site" "$stage"/wheels/*.whl > "$out/pip_wheels.log" 2>&1 ||
    { tail -20 "$out/pip_wheels.log"; exit 1; }
fi
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
grep -E 'epk: ' "$out/pip_install.log" || true
"$py" -c 'import epk; assert epk.HAS_CUDA, "the package was built without device support"; print("epk", epk.__version__, "HAS_CUDA", epk.HAS_CUDA)'
"$py" -c 'import epk.stored as s; assert s.available(), s.missing(); print("epk.stored: client-side decode")'
# PY_INSTALL_ONLY=1: stop here, the package installed in /tmp/epk-pysite (for a run of its tools, such as
# scripts/gpu/calibration_run.py).
[[ "${PY_INSTALL_ONLY:-0}" == 1 ]] && exit 0
# -s: the tests print their figures (MiniLM cosine, NF4 where bitsandbytes is installed).
"$py" -m pytest -v -s -rs client/python/tests 2>&1 | tee "$out/pytest.log"
rc=${PIPESTATUS[0]}
grep -E 'passed|failed|skipped|cosine' "$out/pytest.log" | tail -5
exit "$rc"
