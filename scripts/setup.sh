#!/usr/bin/env bash
# Installs every build and test dependency from Debian's packages (plus a small Python venv for the optional
# reference checks). Safe to run again. The CUDA toolkit comes with the machine (nvcc on PATH) and is optional.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PACKAGES=(
  cmake ninja-build g++ pkg-config git python3 python3-venv
  libboost-dev libspdlog-dev libfmt-dev liburing-dev libxxhash-dev
  nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libsystemd-dev
  libgtest-dev libgmock-dev
  ccache         # scripts/build.sh compiles through it where present
  systemd tmux   # the service tests: systemd-analyze verify, systemd-socket-activate; epk top under tmux
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python packages for the tests, from PyPI into .venv: prometheus_client's parser reads epkd's metrics.
root="$(cd "$(dirname "$0")/.." && pwd)"
if ! "$root/.venv/bin/python3" -c "import prometheus_client" >/dev/null 2>&1; then
  echo "setup: installing prometheus_client into .venv"
  python3 -m venv "$root/.venv"
  "$root/.venv/bin/pip" install -q prometheus_client
fi

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit found ($(PATH=$PATH:/usr/local/cuda/bin nvcc --version | tail -n 1))"
else
  echo "setup: no CUDA toolkit; building the CPU paths only"
fi
