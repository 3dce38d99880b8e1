#!/usr/bin/env bash
# The README's test command: set up, build and run every test (GPU tests skip without a GPU).
# Usage: scripts/test.sh [preset]   (default, asan, tsan)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
bash scripts/setup.sh
bash scripts/build.sh "$preset"
ctest --preset "$preset" -j "$(nproc)" --timeout 600
