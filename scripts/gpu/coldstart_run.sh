#!/usr/bin/env bash
# Issue 16's cold-start and attach benchmarks (bench/coldstart/coldstart_bench.py), one table at the end.
# On the GPU machine, from the repository root of the copied tree, against a staged folder (scripts/gpu/stage.sh STAGE
# here: it copies epkd, libepk.so.2, the epk CLI, epk_replicate_layers, this script and the loaders' wheels, from
# the repository's .whl/, into STAGE):
#   bash scripts/gpu/coldstart_run.sh STAGE [MODEL_DIR] [--dry-run] [DRIVER ARGS...]
# MODEL_DIR (default /tmp/epk-prefill, what scripts/gpu/prefill_run.sh's prepare step leaves) holds model.epk (a
# Llama-3-8B-shaped model at 4 bpp, embeddings and LM head included) and the same model's BF16 safetensors as
# model.safetensors or decompressed/model.safetensors. Nothing is written there; the attach model (its layers
# repeated: the largest .epk that fits the free disk, half the RAM and 100 GB) and the work files go to
# /tmp/epk-coldstart, the results and logs to $OUT (default /tmp/epk-coldstart-out).
# --dry-run (here, no GPU): a small demo model made with make_demo_model, epkd --cpu, the loaders onto the CPU.
# DRIVER ARGS go to `coldstart_bench.py drive`, e.g. --only epk,safetensors --deadline-s 200. LIMIT (default 290 s).
# The loaders' wheels (fastsafetensors: nogds, runai-model-streamer, humanize) are installed with pip --no-index into
# /tmp/epk-coldstart/site, once per set of wheels.
set -euo pipefail
[[ $# -ge 1 ]] || { sed -n '2,17p' "$0"; exit 2; }
stage="$(cd "$1" && pwd)"
shift
# The tree: where this script sits in it, or (a copy in STAGE run from the repository root) the working directory.
for root in "$(dirname "$0")/../.." "$PWD"; do [[ -f "$root/bench/coldstart/coldstart_bench.py" ]] && break; done
cd "$root"
[[ -f bench/coldstart/coldstart_bench.py ]] || { echo "coldstart_run: run it from the repository root" >&2; exit 2; }
model_dir=/tmp/epk-prefill
dry=0
if [[ $# -ge 1 && "$1" != --* ]]; then
  model_dir="$1"
  shift
fi
if [[ $# -ge 1 && "$1" == --dry-run ]]; then
  dry=1
  shift
fi
limit="${LIMIT:-290}"
out="${OUT:-/tmp/epk-coldstart-out}"
work=/tmp/epk-coldstart
py="${PYTHON:-python3.12}"
command -v "$py" >/dev/null || py=python3
mkdir -p "$out" "$work"
export LD_LIBRARY_PATH="$stage/epkd/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader 2>&1 | head -2 || true
  echo "nproc $(nproc); $(free -g | awk '/Mem:/ {print $2 " GiB RAM"}'); free disk in /tmp: $(df -h --output=avail /tmp | tail -1)"
} 2>&1 | tee "$out/machine.txt"

# The loaders' wheels, installed once per set of wheels (their names are the stamp).
site="$work/site"
wheels=("$stage"/wheels/*.whl)
if [[ -e "${wheels[0]}" ]]; then
  stamp="$(basename -a "${wheels[@]}" | sort | tr '\n' ' ') $($py -c 'import sys; print(sys.version_info[:2])')"
  if [[ "$(cat "$site/.stamp" 2>/dev/null || true)" != "$stamp" ]]; then
    rm -rf "$site"
    if "$py" -m pip install --no-deps --no-index --target "$site" "${wheels[@]}" > "$out/pip_wheels.log" 2>&1; then
      echo "$stamp" > "$site/.stamp"
    else
      echo "coldstart_run: the wheels did not install (the loaders will report it):"
      tail -3 "$out/pip_wheels.log"
    fi
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "coldstart_run: no wheels in $stage/wheels (fastsafetensors and runai will report it)"
fi

# The epk package for the attach step's client-side decode, where scripts/gpu/python_run.sh (PY_INSTALL_ONLY=1)
# installed it.
[[ -d /tmp/epk-pysite/epk ]] && export PYTHONPATH="/tmp/epk-pysite${PYTHONPATH:+:$PYTHONPATH}"
driver=(--stage "$stage" --out "$out" --work "$work" --tree "$PWD" --deadline-s "$((limit - 10))")
if [[ $dry == 1 ]]; then
  # A small model the same way prepare makes the real one: BF16 safetensors, compressed at 4 bpp, decompressed.
  model_dir="$work/dry-model"
  if [[ ! -f "$model_dir/decompressed/model.safetensors" ]]; then
    rm -rf "$model_dir"
    mkdir -p "$model_dir/decompressed"
    "$stage/cli/make_demo_model" "$model_dir/src" --layers 4 --hidden 256 > /dev/null
    "$stage/cli/epk" compress "$model_dir/src" -o "$model_dir/model.epk" --bpp 4 --include-embeddings > /dev/null
    "$stage/cli/epk" decompress "$model_dir/model.epk" -o "$model_dir/decompressed/model.safetensors" > /dev/null
  fi
  driver+=(--device cpu --src-layers 4 --attach-layers 12 --budget-mb 64 --attach-budget-mb 64)
fi
[[ -f "$model_dir/model.epk" ]] || { echo "coldstart_run: $model_dir/model.epk is missing (prefill_run.sh prepare)" >&2; exit 1; }
"$py" bench/coldstart/coldstart_bench.py drive --model-dir "$model_dir" "${driver[@]}" "$@"
