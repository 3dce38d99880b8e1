#!/usr/bin/env bash
# On the GPU machine, from the repository root of the copied tree: epkd's device path under compute-sanitizer
# memcheck. A sanitized epkd (device 0) and a plain --cpu epkd serve the same two models: the demo model compressed
# at 4 bpp (lattice-rans) and a one-tensor intq model imported from the committed GPTQ fixture; `epk get` fetches
# every serving layout of a few tensors from both and compares the bytes; then epkd is stopped with SIGTERM so that
# the sanitizer writes its summary. STAGE holds epkd/ (with lib/) and cli/ (epk, make_demo_model) as
# scripts/gpu/stage.sh stages them. Prints the comparison, epkd's exit code, the sanitizer's summary and epkd's
# path counts last. EPKD_ARGS go to the sanitized epkd (`--tier-budget-mb 0`: every decode from its host tier).
#   bash scripts/gpu/epkd_sanitize.sh STAGE [EPKD_ARGS...]
set -uo pipefail
stage="$(cd "${1:?usage: epkd_sanitize.sh STAGE [EPKD_ARGS...]}" && pwd)"
shift
root="$(pwd)"
export LD_LIBRARY_PATH="$stage/epkd/lib"
T=$(mktemp -d)
cd "$T"
"$stage/cli/make_demo_model" m --layers 2 --hidden 512 >/dev/null
"$stage/cli/epk" compress m -o m.epk --bpp 4 >/dev/null
# The fixture's tensors are named bare (qweight, ...): give them a layer's prefix and a quantize_config.json.
mkdir g
python3 - "$root/tests/data/layouts/gptq_4bit_v1_asym.safetensors" g/model.safetensors <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
head, data = json.loads(b[8:8 + n]), b[8 + n:]
out, blobs, off = {}, [], 0
for k in ("qweight", "qzeros", "scales", "g_idx"):
    s, e = head[k]["data_offsets"]
    out["model.layers.0.mlp.up_proj." + k] = {"dtype": head[k]["dtype"], "shape": head[k]["shape"],
                                              "data_offsets": [off, off + e - s]}
    blobs.append(data[s:e])
    off += e - s
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
echo '{"bits": 4, "group_size": 64, "desc_act": false, "sym": false, "quant_method": "gptq"}' > g/quantize_config.json
"$stage/cli/epk" import g -o q.epk | tail -1
(timeout -k 5 300 compute-sanitizer --tool memcheck --error-exitcode 9 --log-file epkd_san.txt "$stage/epkd/epkd" \
  --socket "$T/d.sock" --budget-mb 256 --model "m=$T/m.epk" --model "q=$T/q.epk" --devices 0 "$@" > epkd_d.txt 2>&1
 echo "sanitized epkd exit $?" > rc.txt) &
"$stage/epkd/epkd" --socket "$T/h.sock" --budget-mb 256 --model "m=$T/m.epk" --model "q=$T/q.epk" --cpu \
  > epkd_h.txt 2>&1 &
host_pid=$!
for i in $(seq 1 120); do [[ -S "$T/d.sock" && -S "$T/h.sock" ]] && break; sleep 1; done
echo "both listening after ${i} s"
n=0
bad=0
get() {  # MODEL TENSOR LAYOUT: fetched from both, compared (a refusal must come from both)
  local d_ok=1 h_ok=1
  timeout 60 "$stage/cli/epk" get --socket "$T/d.sock" "$1" "$2" --layout "$3" -o d.st > d.txt 2>&1 || d_ok=0
  timeout 60 "$stage/cli/epk" get --socket "$T/h.sock" "$1" "$2" --layout "$3" -o h.st > h.txt 2>&1 || h_ok=0
  n=$((n + 1))
  if [[ $d_ok != "$h_ok" ]] || { [[ $d_ok == 1 ]] && ! cmp -s d.st h.st; }; then
    bad=$((bad + 1))
    echo "DIFF $1 $2 $3: device $(tail -1 d.txt) / host $(tail -1 h.txt)"
  fi
  rm -f d.st h.st
}
for l in dense:bf16 dense:fp16 dense:fp32 rowwise:int8 rowwise:fp8_e4m3 stored; do
  get m model.layers.0.mlp.up_proj.weight "$l"
  get m model.layers.1.self_attn.k_proj.weight "$l"
done
for l in stored dense:bf16 dense:fp16 dense:fp32 gptq gptq-v2 awq marlin; do
  get q model.layers.0.mlp.up_proj.weight "$l"
done
kill -TERM "$host_pid" 2>/dev/null
pkill -TERM -x epkd  # the sanitized one's own process (compute-sanitizer waits for it, then writes its summary)
for i in $(seq 1 90); do [[ -f rc.txt ]] && break; sleep 1; done
echo "== $n requests compared between the sanitized device epkd and the host epkd: $bad differ"
cat rc.txt 2>/dev/null || echo "sanitized epkd did not exit within 90 s"
grep -E "ERROR SUMMARY" epkd_san.txt
grep -B2 -A12 -E "Invalid|Leak|Uninit" epkd_san.txt | head -30
grep -E "intq slots|shard slots" epkd_d.txt
ok=1
if [[ " $* " == *" --tier-budget-mb 0 "* ]]; then  # the staged path must have served: the model in its host tier
  grep -E "model_resident model=m " epkd_d.txt | head -1
  grep -qE "model_resident model=m where=host device=" epkd_d.txt || { echo "model m is not in epkd's host tier"; ok=0; }
fi
[[ $bad == 0 ]] || ok=0
grep -q "ERROR SUMMARY: 0 errors" epkd_san.txt || ok=0
grep -q "exit 0" rc.txt 2>/dev/null || ok=0
cd "$root" && rm -rf "$T"
[[ $ok == 1 ]]
