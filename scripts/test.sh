#!/usr/bin/env bash
# The README's test command: set up, build and run every test (GPU tests skip without a GPU), then the Python
# package's tests (scripts/python_test.sh: torch and GPU tests skip where those are missing).
# Usage: scripts/test.sh [preset]   (default, asan, tsan)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
bash scripts/setup.sh
bash scripts/build.sh "$preset"
ctest --preset "$preset" -j "$(nproc)" --timeout 600
bash scripts/python_test.sh "$preset"
