#!/usr/bin/env bash
# On the GPU machine, from the repository root of the copied tree: the package as a user installs it. A new venv,
# `pip install ./client/python` with nothing else (no environment variable, no prior build of the repository), then
# epk.torch.load(..., decode="client") through the package's own test (a Llama-shaped model served by the staged epkd,
# logits bit-equal to the decompressed model's).
# That machine reaches no package index: pip's isolated build takes scikit-build-core and nanobind (and their needs,
# packaging and pathspec) from WHEELS, as it would from PyPI; torch, transformers and numpy come from the system's
# site-packages (--system-site-packages).
# Usage: bash scripts/gpu/fresh_venv_check.sh STAGE WHEELS OUT [PYTEST ARGS...]   (STAGE: scripts/gpu/stage.sh's
# folder; PYTEST ARGS: more tests to run in the venv)
set -euo pipefail
cd "$(dirname "$0")/../.."
stage="$(cd "$1" && pwd)"
wheels="$(cd "$2" && pwd)"
out="$3"
shift 3
mkdir -p "$out"
py="${PYTHON:-python3.12}"
venv=/tmp/epk-fresh-venv
rm -rf "$venv"
"$py" -m venv --system-site-packages "$venv"
t0=$SECONDS
"$venv/bin/pip" install --no-index --find-links "$wheels" ./client/python > "$out/fresh_pip.log" 2>&1 ||
  { tail -40 "$out/fresh_pip.log"; exit 1; }
echo "fresh venv: pip install ./client/python took $((SECONDS - t0)) s"
"$venv/bin/python" -c 'import epk.stored as s; assert s.available(), s.missing(); print("epk.stored: decode")'
export LD_LIBRARY_PATH="$stage/epkd/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The test's fixtures find epkd and epk here (the package itself takes no variable). torch, transformers and pytest
# are in the site-packages of the machine's python (itself a venv there, which a new venv does not inherit): a .pth
# adds them after the new venv's own packages, as a user's venv with torch would have them.
machine_site="$("$py" -c 'import site; print(site.getsitepackages()[0])')"
echo "$machine_site" > "$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/machine_site.pth"
EPK_EPKD="$stage/epkd/epkd" EPK_CLI="$stage/cli/epk" "$venv/bin/python" -m pytest -q -rs \
  client/python/tests/test_torch.py::test_client_side_decode_gives_epkds_bytes_and_the_decompressed_models_logits \
  "$@" 2>&1 | tee "$out/fresh_pytest.log"
exit "${PIPESTATUS[0]}"
