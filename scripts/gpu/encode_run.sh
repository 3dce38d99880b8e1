#!/usr/bin/env bash
# On the GPU machine, from the folder scripts/gpu/encode_stage.sh filled (here: its bin/, cli/, py/): the device
# encoder's tests (byte-for-byte against the CPU encoder), its bench (10240x3840 layer, Llama-3-8B-shaped set), the
# reference package's GPU encoder on the same tensors, and `epk compress --device cuda` of a demo model end to end
# against --device cpu (the two files must be identical). Ends in a short table of the RESULT lines.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
log="$work/log"
nvidia-smi -L 2>/dev/null || true
echo "== device encoder tests"
timeout 75 "$here/bin/epk_cuda_encode_test" --gtest_brief=1 2>&1 | tail -60
echo "test rc=${PIPESTATUS[0]}"
timeout 60 "$here/bin/epk_cuda_encode_copy_test" --gtest_brief=1 2>&1 | tail -20
echo "copy test rc=${PIPESTATUS[0]}"
echo "== bench"
timeout 75 "$here/bin/gpu_encode_bench" --layers "${EPK_BENCH_LAYERS:-32}" --cpu-tensors 7 2>&1 | tee "$log"
echo "bench rc=${PIPESTATUS[0]}"
echo "== reference encoder"
# A pure-Python wheel is a zip of the package and its dist-info: extracted onto PYTHONPATH it is installed (the
# system python there is externally managed, so no pip into it).
if python3 -m zipfile -e "$(ls "$here/py/"entropack-*.whl | head -1)" "$work/pylib"; then
  PYTHONPATH="$work/pylib${PYTHONPATH:+:$PYTHONPATH}" timeout 50 python3 "$here/py/ref_encode_bench.py" \
    --max-seconds 20 2>&1 | tail -5 | tee -a "$log"
else
  echo "reference wheel did not extract"
fi
echo "== epk compress end to end"
"$here/cli/make_demo_model" "$work/demo" --layers 4 --hidden 2048 >/dev/null
/usr/bin/time -f "RESULT cli_compress_cuda %e s wall" "$here/cli/epk" compress "$work/demo" -o "$work/gpu.epk" --bpp 4 \
  --device cuda 2>&1 | tail -2 | tee -a "$log"
/usr/bin/time -f "RESULT cli_compress_cpu %e s wall" "$here/cli/epk" compress "$work/demo" -o "$work/cpu.epk" --bpp 4 \
  --device cpu --threads "$(nproc)" 2>&1 | tail -2 | tee -a "$log"
if cmp -s "$work/gpu.epk" "$work/cpu.epk"; then echo "RESULT cli files identical" | tee -a "$log"; else
  echo "RESULT cli files DIFFER" | tee -a "$log"; fi
# --budget-bpp (one device encoder, tensors in order) and --rule on both devices: the same files again.
"$here/cli/epk" compress "$work/demo" -o "$work/gpu_b.epk" --budget-bpp 3 --rule '*down_proj*=5' --device cuda \
  >/dev/null 2>&1
"$here/cli/epk" compress "$work/demo" -o "$work/cpu_b.epk" --budget-bpp 3 --rule '*down_proj*=5' --device cpu \
  --threads "$(nproc)" >/dev/null 2>&1
if cmp -s "$work/gpu_b.epk" "$work/cpu_b.epk"; then echo "RESULT cli budget files identical" | tee -a "$log"; else
  echo "RESULT cli budget files DIFFER" | tee -a "$log"; fi
# A larger file, --device cuda only (the CPU would take minutes): compress's own closing line gives its seconds.
timeout 60 "$here/cli/make_demo_model" "$work/big" --layers 2 --hidden 4096 >/dev/null &&
  /usr/bin/time -f "RESULT cli_compress_cuda_2x4096 %e s wall" "$here/cli/epk" compress "$work/big" \
    -o "$work/big.epk" --bpp 4 --device cuda 2>&1 | tail -2 | tee -a "$log"
echo "== table"
grep -E "RESULT|^total:" "$log"
rm -rf "$work"
