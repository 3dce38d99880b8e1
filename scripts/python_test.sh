#!/usr/bin/env bash
# The epk Python package's tests (client/python/tests) against this build's epkd and epk: a venv in the build folder,
# the package installed from the tree with the README's command, then pytest. Tests that need torch or a GPU skip.
# Usage: scripts/python_test.sh [preset]  (after scripts/build.sh PRESET; default: default)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
build="build/$preset"
venv="$build/pyvenv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q nanobind scikit-build-core numpy pytest
# The extension (with CUDA: codec/ and the decoder too) compiles through ccache where installed: CMake takes the
# compiler launchers from the environment.
export PATH="$PATH:/usr/local/cuda/bin"
source scripts/ccache_env.sh
"$venv/bin/python" -m pip install -q ./client/python
# From the repository root, so that `import epk` is the installed package, not client/python/epk. pytest exits 5
# when it collected no tests, which fails here like any other failure.
EPK_BUILD_DIR="$PWD/$build" "$venv/bin/python" -m pytest -q -rs client/python/tests
# The perplexity table's NumPy baselines (scripts/calibration/quantizers.py: NF4, GPTQ) against plain loops: numpy is
# in this venv, not always in the system's python.
"$venv/bin/python" tests/calibration/quantizers_test.py
