#!/usr/bin/env bash
# On the GPU machine, from the repository root of the copied tree (scripts/gpu/stage.sh STAGE here first): issue 18's
# tensor-parallel shards on the device path.
#   1. epkd_shard_gpu_test: every shard of every layout decoded on the device equals the slice of the whole device
#      decode, bit for bit
#   2. the epk package built from this tree (as scripts/gpu/python_run.sh builds it)
#   3. a random Llama-shaped model (4 layers, hidden 1024; scripts/gpu/shard_run.py make), `epk compress --bpp 4`
#   4. one epkd serving it; the unsharded run (1 rank, which also checks the tensor-parallel layer against
#      transformers' own), then N ranks (default 2) each attaching its shards (epk.torch.load(..., rank=, world_size=)),
#      checking them bit for bit against the whole tensors' slices, running the tensor-parallel forward with the
#      row-parallel outputs all-reduced, and printing its decoded bytes and decode time against the whole tensors'
#   5. the N-rank forward compared with the unsharded one
# Usage: bash scripts/gpu/shard_run.sh STAGE [OUT] [--gpus G] [--world N]
#   --gpus 1 (default): the N ranks share GPU 0 (two processes, torch.distributed over gloo)
#   --gpus 2: one process per GPU (rank r on GPU r, NCCL), epkd serving both devices
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -ge 1 ]] || { sed -n '2,16p' "$0"; exit 2; }
stage="$(cd "$1" && pwd)"
shift
out="${OUT:-/tmp/epk-shard-out}"
if [[ $# -ge 1 && "$1" != --* ]]; then out="$1"; shift; fi
gpus=1
world=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --gpus) gpus="$2"; shift 2 ;;
    --world) world="$2"; shift 2 ;;
    *) echo "shard_run: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
py="${PYTHON:-python3.12}"
export LD_LIBRARY_PATH="$stage/epkd/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export EPK_EPKD="$stage/epkd/epkd" EPK_CLI="$stage/cli/epk" EPK_TEST_CLIENT="$stage/epkd/epk_test_client"
work=/tmp/epk-shard
mkdir -p "$work"
{
  date -u
  nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total --format=csv,noheader 2>&1 | head -8 || true
  "$py" -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "cuda",
            torch.version.cuda, "transformers", transformers.__version__)' || true
} 2>&1 | tee "$out/machine.txt"

echo "== 1. epkd_shard_gpu_test"
"$stage/epkd/epkd_shard_gpu_test" 2>&1 | tee "$out/epkd_shard_gpu_test.log" | grep -E '^\[  (PASSED|FAILED|SKIPPED) |checked|Failure' || true
grep -q '^\[  PASSED  \] 1 test' "$out/epkd_shard_gpu_test.log" || { echo "shard_run: epkd_shard_gpu_test did not pass" >&2; tail -30 "$out/epkd_shard_gpu_test.log"; exit 1; }

echo "== 2. the epk package"
if [[ -z "${CUDA_HOME:-}" && ! -f /usr/local/cuda/include/cuda.h && -f "$stage/include/cuda.h" ]]; then
  export CUDA_HOME="$stage"
fi
site="$work/pysite"
rm -rf "$site"
EPK_PY_CUDA=ON "$py" -m pip install --no-build-isolation --no-deps --no-index --target "$site" -v ./client/python \
  > "$out/pip_install.log" 2>&1 || { tail -40 "$out/pip_install.log"; exit 1; }
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"

echo "== 3. the model"
src="$work/src"
if [[ ! -f "$work/model.epk" ]]; then
  rm -rf "$src"
  "$py" scripts/gpu/shard_run.py make "$src" 2>&1 | tee "$out/make.log"
  "$EPK_CLI" compress "$src" -o "$work/model.epk" --bpp 4 --threads "$(nproc)" > "$out/compress.log" 2>&1 ||
    { tail -20 "$out/compress.log"; exit 1; }
  tail -3 "$out/compress.log"
fi

echo "== 4. epkd and the ranks"
devices=0
[[ "$gpus" -ge 2 ]] && devices="$(seq -s, 0 $((gpus - 1)))"
sock="$work/epkd.sock"
epkd_pid=
start_epkd() {  # a fresh epkd (cold cache) for each run: $1 names its log
  rm -f "$sock"
  "$EPK_EPKD" --socket "$sock" --model "llama=$work/model.epk" --budget-mb 1024 --devices "$devices" \
    --log-level info > "$out/epkd_$1.log" 2>&1 &
  epkd_pid=$!
  for _ in $(seq 300); do [[ -S "$sock" ]] && break; sleep 0.1; done
  [[ -S "$sock" ]] || { echo "shard_run: epkd did not listen" >&2; cat "$out/epkd_$1.log"; exit 1; }
}
stop_epkd() { kill -TERM "$epkd_pid"; wait "$epkd_pid" || true; }
trap 'kill "$epkd_pid" 2>/dev/null || true' EXIT
common=(--socket "$sock" --model llama --model-dir "$src")
start_epkd world1
"$py" scripts/gpu/shard_run.py rank --rank 0 --world 1 --device 0 --out "$work/h_world1.pt" "${common[@]}" \
  2>&1 | tee "$out/rank_world1.log"
stop_epkd
start_epkd "world$world"
backend=gloo
[[ "$gpus" -ge 2 ]] && backend=nccl
rm -f "$work/rendezvous"
pids=()
for r in $(seq 0 $((world - 1))); do
  dev=0
  [[ "$gpus" -ge 2 ]] && dev=$((r % gpus))
  "$py" scripts/gpu/shard_run.py rank --rank "$r" --world "$world" --device "$dev" --backend "$backend" \
    --init "$work/rendezvous" --out "$work/h_rank$r.pt" "${common[@]}" > "$out/rank$r.log" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
for r in $(seq 0 $((world - 1))); do cat "$out/rank$r.log"; done
[[ $rc == 0 ]] || { echo "shard_run: a rank failed" >&2; exit 1; }

echo "== 5. the ${world}-rank forward against the unsharded one"
"$py" scripts/gpu/shard_run.py compare "$work/h_world1.pt" "$work/h_rank0.pt"
for r in $(seq 1 $((world - 1))); do "$py" scripts/gpu/shard_run.py compare "$work/h_rank0.pt" "$work/h_rank$r.pt" --tolerance 0; done
stop_epkd
trap - EXIT
grep -hE "shard slots by the CPU path" "$out"/epkd_*.log || true
"$py" - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = []
for f in sorted(out.glob("rank*.log")):  # rank_world1.log first, then rank0.log ...
    for line in f.read_text().splitlines():
        if line.startswith("RANK "):
            rows.append(json.loads(line[5:]))
print(f"{'run':<12}{'rank':>5}{'device':>7}{'bytes':>14}{'decodes':>9}{'decode ms':>11}{'wall ms':>10}")
for r in rows:
    for kind in ("shards", "whole"):
        if kind in r:
            k = r[kind]
            label = f"world {r['world']} {'shard' if kind == 'shards' and r['world'] > 1 else 'whole'}"
            print(f"{label:<12}{r['rank']:>5}{r['device']:>7}{k['bytes']:>14}{k['decodes']:>9}{k['decode_ms']:>11.2f}"
                  f"{k['wall_ms']:>10.2f}")
    print(f"  rank {r['rank']}: {r['shards_checked']} shards bit-equal to the whole tensors' slices"
          f"{'' if not r['shards_mismatched'] else ', MISMATCHED: ' + str(r['shards_mismatched'])}"
          + (f"; TP layer vs transformers (relative): {r['hf_rel_diff']}" if r.get('hf_rel_diff') is not None else ""))
PY
