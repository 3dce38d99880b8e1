#!/usr/bin/env bash
# On the GPU machine, from the repository root of the copied tree: issue 14's prefill benchmark
# (bench/prefill/prefill_bench.py) against the staged epkd, epk and libepk (scripts/gpu/stage.sh STAGE here first).
#   prepare: the random Llama-3-8B-shaped model (make-model, on the GPU) in /tmp/epk-prefill/src, `epk compress --bpp 4
#            --include-embeddings` into model.epk, `epk decompress` into decompressed/ (with src's config.json)
#   run:     every setup in a process of its own, then the tables (results and logs also under OUT)
#   all:     prepare, then run with the time left (the default)
# Work already done in /tmp/epk-prefill (a finished model, .epk, decompressed folder, setup results) is skipped, so a
# call cut off by the time limit is resumed by the same command (/tmp survives between calls made while the machine
# stays warm). --quick: a 4-layer model in /tmp/epk-prefill/quick, 1024 tokens only, 1 warm-up + 3 runs.
# Usage: bash scripts/gpu/prefill_run.sh STAGE [OUT] [prepare|run|all] [--quick] [DRIVER ARGS...]
#   (STAGE: the staged folder, e.g. .gpu; OUT: default $OUT; DRIVER ARGS go to `prefill_bench.py drive`, e.g.
#    --setups resident,epk-client --force)
# Issue 32's cap sweep, one call (resumable: repeat it until the driver exits 0):
#   bash scripts/gpu/prefill_run.sh .gpu $OUT all --setups decompressed,resident,epk-client-host,offload-bf16,nf4,accelerate \
#     --cap-gb 4,6,8,12 --cap-headroom-gb 2.5,4,4,4
# epk-client-host and accelerate run once per cap; offload-bf16 and nf4 once, their peak judged against each cap.
# nf4 needs bitsandbytes' wheel in .whl/ (scripts/gpu/trim_bnb_wheel.sh on the build machine; carry .whl).
# The 70B shape: scripts/gpu/prefill70b_run.sh.
# LIMIT (seconds, default 590): this call's time; the driver gets what prepare leaves of it.
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -ge 1 ]] || { sed -n '2,21p' "$0"; exit 2; }
stage="$(cd "$1" && pwd)"
shift
out="${OUT:-/tmp/epk-prefill-out}"
phase=all
quick=0
if [[ $# -ge 1 && "$1" != prepare && "$1" != run && "$1" != all && "$1" != --* ]]; then
  out="$1"
  shift
fi
if [[ $# -ge 1 && ( "$1" == prepare || "$1" == run || "$1" == all ) ]]; then
  phase="$1"
  shift
fi
if [[ $# -ge 1 && "$1" == --quick ]]; then
  quick=1
  shift
fi
limit="${LIMIT:-590}"
mkdir -p "$out"
py="${PYTHON:-python3.12}"
root=/tmp/epk-prefill
work="$root"
layers=32
driver_args=()
if [[ $quick == 1 ]]; then
  work="$root/quick"
  layers=4
  driver_args=(--lengths 1024 --warmup 1 --runs 3 --slow-runs 3 --gen-runs 1)
fi
mkdir -p "$work"
export LD_LIBRARY_PATH="$stage/epkd/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export EPK_EPKD="$stage/epkd/epkd" EPK_CLI="$stage/cli/epk"
for f in "$EPK_EPKD" "$EPK_CLI"; do [[ -x "$f" ]] || { echo "prefill_run: $f is missing (stage.sh)" >&2; exit 1; }; done

stamp() { echo "$(date -u +%H:%M:%S) +${SECONDS}s"; }
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader 2>&1 | head -2 || true
  "$py" -c 'import sys, torch, transformers, accelerate; print(sys.version.split()[0], "torch", torch.__version__,
            "cuda", torch.version.cuda, "transformers", transformers.__version__, "accelerate", accelerate.__version__)' \
    || true
  echo "nproc $(nproc); free disk in /tmp: $(df -h --output=avail /tmp | tail -1)"
} 2>&1 | tee "$out/machine.txt"

# The epk package (rebuilt when its sources change) and bitsandbytes' wheel, if there is one (the nf4 setup).
source scripts/gpu/prefill_pysite.sh

bench=bench/prefill/prefill_bench.py
copy_src_config() {  # the decompressed model's config: src's (epk decompress writes the weights only)
  cp "$work/src/config.json" "$work/decompressed/"
  if [[ -f "$work/src/generation_config.json" ]]; then cp "$work/src/generation_config.json" "$work/decompressed/"; fi
}
prepare() {
  local t0
  if [[ ! -f "$work/src/.complete" ]]; then
    t0=$SECONDS
    # GB: 0.44 a layer and 2.2 for the embeddings and the head in bf16, held as src/ and decompressed/ (and about a
    # quarter of that as model.epk), plus room for the reference logits and the logs.
    local need=$(((layers * 44 + 220) * 23 / 1000 + 2))
    local avail
    avail=$(df --output=avail -BG /tmp | tail -1 | tr -dc 0-9)
    [[ $avail -ge $need ]] || { echo "prefill_run: $avail GB free in /tmp, about $need GB needed" >&2; exit 1; }
    "$py" "$bench" make-model --out "$work/src" --layers "$layers"
    echo "== make-model: $((SECONDS - t0)) s ($(stamp))"
  else
    echo "== make-model: $work/src done earlier"
  fi
  epk_compress_once "$work/src" "$work/model.epk"
  epk_decompress_once "$work/model.epk" "$work/decompressed" copy_src_config
}

rc=0
if [[ $phase == prepare || $phase == all ]]; then
  t_prep=$SECONDS
  prepare
  echo "== prepare phase: $((SECONDS - t_prep)) s"
fi
if [[ $phase == run || $phase == all ]]; then
  t_run=$SECONDS
  left=$((limit - SECONDS - 10))
  "$py" "$bench" drive --workdir "$work" --out "$out" --deadline-s "$left" ${driver_args[@]+"${driver_args[@]}"} "$@" \
    || rc=$?
  echo "== run phase: $((SECONDS - t_run)) s (driver exit $rc: 0 all done, 2 setups left for another call)"
fi
exit "$rc"
