#!/usr/bin/env bash
# On the GPU machine, from the repository root of the copied tree: issue 32's 70B shape (Llama-3-70B: 80 layers,
# hidden 8192, FFN 28672, 64 query heads, 8 KV heads, vocab 128256) at 4 bpp, served by epk-client-host under a GPU
# memory cap, against compute-only, with the staged epkd, epk and epk_replicate_layers (scripts/gpu/stage.sh STAGE).
# There is no BF16 source of the whole model (140 GB): prepare makes
#   src_k/          a random 70B-shaped model of K layers (make-model --shape 70b --layers K, on the GPU; K=2)
#   layers.epk      `epk compress src_k --bpp 4 --include-embeddings` (embedding and LM head at 4 bpp too)
#   decompressed/   `epk decompress layers.epk` with src_k's config.json; then src_k/ is removed (disk)
#   src/            config.json only, 80 layers (make-model --config-only): the shape epk.torch.load builds on meta
#   model.epk       epk_replicate_layers layers.epk --layers 80: layer l is encoded layer l mod K, streams copied
# in /tmp/epk-prefill70b, each step skipped when its output exists (a cut-off call is resumed by the same command).
# run: prefill_bench.py drive with
#   decompressed    the 80-layer model with layer l's weights tied to decoded layer l mod K, all resident in BF16:
#                   what model.epk computes, so epk-client-host's logits are compared with it bit for bit, and timed
#                   (--time-decompressed): compute-only measured
#   fit-bf16        random untied BF16 models of --fit-layers layers (default 10,20), timed: compute-only estimated
#                   as a line in the layer count read at 80
#   epk-client-host the .epk under the cap (default 24 GiB, headroom 8: max_gpu_gb 16; with 6 the 16384-token
#                   activations beside a 3.4 GB decode buffer went 1.5 GB over, docs/measurements/prefill.md)
# Usage: bash scripts/gpu/prefill70b_run.sh STAGE [OUT] [prepare|run|all] [--evict-8b] [DRIVER ARGS...]
#   --evict-8b: the disk (64 GiB) does not hold both this and prefill_run.sh's 8B folder (36 GB): remove
#   /tmp/epk-prefill's model files (src, decompressed, model.epk; its results and the built package are kept)
#   when the free space is short. Without it a short disk stops prepare with a message.
# K (default 2): the encoded layers. LIMIT (seconds, default 590): this call's time.
# Host memory: epkd's host tier is the whole tier (~35 GB, shared with the client) beside the page cache of the .epk;
# 128 GiB is enough.
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -ge 1 ]] || { sed -n '2,26p' "$0"; exit 2; }
stage="$(cd "$1" && pwd)"
shift
out="${OUT:-/tmp/epk-prefill70b-out}"
phase=all
evict=0
if [[ $# -ge 1 && "$1" != prepare && "$1" != run && "$1" != all && "$1" != --* ]]; then
  out="$1"
  shift
fi
if [[ $# -ge 1 && ( "$1" == prepare || "$1" == run || "$1" == all ) ]]; then
  phase="$1"
  shift
fi
if [[ $# -ge 1 && "$1" == --evict-8b ]]; then
  evict=1
  shift
fi
limit="${LIMIT:-590}"
k="${K:-2}"
layers=80
mkdir -p "$out"
py="${PYTHON:-python3.12}"
work=/tmp/epk-prefill70b
mkdir -p "$work"
export LD_LIBRARY_PATH="$stage/epkd/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export EPK_EPKD="$stage/epkd/epkd" EPK_CLI="$stage/cli/epk"
replicate="$stage/bin/epk_replicate_layers"
for f in "$EPK_EPKD" "$EPK_CLI" "$replicate"; do
  [[ -x "$f" ]] || { echo "prefill70b_run: $f is missing (stage.sh)" >&2; exit 1; }
done
stamp() { echo "$(date -u +%H:%M:%S) +${SECONDS}s"; }
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader 2>&1 | head -2 || true
  echo "nproc $(nproc); $(free -g | awk '/Mem:/ {print $2 " GiB RAM, " $7 " GiB available"}'); free disk in /tmp:" \
    "$(df -h --output=avail /tmp | tail -1)"
} 2>&1 | tee "$out/machine.txt"
source scripts/gpu/prefill_pysite.sh
bench=bench/prefill/prefill_bench.py

# GB still to be written by the steps not done yet: src_k (4.2 + 1.71 a layer), layers.epk and decompressed (about a
# quarter and the same as src_k), model.epk (0.53 + 0.43 a layer), 2 GB for logs and logits.
need_gb() {
  local n=2
  [[ -f "$work/layers.epk" ]] || n=$((n + (420 + 171 * k) * 5 / 400))
  [[ -f "$work/decompressed/.complete" ]] || n=$((n + (420 + 171 * k) / 100))
  [[ -f "$work/model.epk" ]] || n=$((n + (53 + 43 * layers) / 100))
  echo "$n"
}
check_disk() {
  local need avail
  need=$(need_gb)
  avail=$(df --output=avail -BG /tmp | tail -1 | tr -dc 0-9)
  if [[ $avail -lt $need && $evict == 1 && -d /tmp/epk-prefill ]]; then
    echo "== evicting the 8B model files from /tmp/epk-prefill ($avail GB free, $need GB needed)"
    rm -rf /tmp/epk-prefill/src /tmp/epk-prefill/decompressed /tmp/epk-prefill/model.epk /tmp/epk-prefill/quick
    avail=$(df --output=avail -BG /tmp | tail -1 | tr -dc 0-9)
  fi
  [[ $avail -ge $need ]] || {
    echo "prefill70b_run: $avail GB free in /tmp, about $need GB needed (--evict-8b removes the 8B model files)" >&2
    exit 1
  }
}

# src_k's config.json (K layers) beside the decoded weights: the decompressed model's layer count tells the driver
# to tie its layers.
k_layer_config() {
  "$py" "$bench" make-model --shape 70b --layers "$k" --config-only --out "$work/decompressed" > /dev/null
}
prepare() {
  local t0
  check_disk
  if [[ ! -f "$work/layers.epk" && ! -f "$work/src_k/.complete" ]]; then
    t0=$SECONDS
    "$py" "$bench" make-model --shape 70b --layers "$k" --out "$work/src_k"
    echo "== make-model ($k layers): $((SECONDS - t0)) s ($(stamp))"
  fi
  epk_compress_once "$work/src_k" "$work/layers.epk"
  epk_decompress_once "$work/layers.epk" "$work/decompressed" k_layer_config
  rm -rf "$work/src_k"  # layers.epk and decompressed/ are all that is needed of it
  if [[ ! -f "$work/src/.complete" ]]; then
    "$py" "$bench" make-model --shape 70b --layers "$layers" --config-only --out "$work/src"
  fi
  if [[ ! -f "$work/model.epk" ]]; then
    t0=$SECONDS
    rm -f "$work/model.epk.partial"
    "$replicate" "$work/layers.epk" -o "$work/model.epk.partial" --layers "$layers" > "$out/replicate.log" 2>&1 \
      || { tail -30 "$out/replicate.log"; exit 1; }
    mv "$work/model.epk.partial" "$work/model.epk"
    cat "$out/replicate.log"
    echo "== replicate to $layers layers: $((SECONDS - t0)) s ($(stamp)), $(du -h "$work/model.epk" | cut -f1)"
  else
    echo "== replicate: $work/model.epk done earlier"
  fi
}

rc=0
if [[ $phase == prepare || $phase == all ]]; then
  t_prep=$SECONDS
  prepare
  echo "== prepare phase: $((SECONDS - t_prep)) s; free disk in /tmp: $(df -h --output=avail /tmp | tail -1)"
fi
if [[ $phase == run || $phase == all ]]; then
  t_run=$SECONDS
  left=$((limit - SECONDS - 10))
  "$py" "$bench" drive --workdir "$work" --out "$out" --deadline-s "$left" \
    --setups decompressed,fit-bf16,epk-client-host --time-decompressed --cap-gb 24 --cap-headroom-gb 8 "$@" || rc=$?
  echo "== run phase: $((SECONDS - t_run)) s (driver exit $rc: 0 all done, 2 setups left for another call)"
fi
exit "$rc"
