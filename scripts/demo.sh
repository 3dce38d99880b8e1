#!/usr/bin/env bash
# The README's demo command: set up, build, then run the main job on an embedded default: generate a small model,
# pack it into an .epk file, inspect it, unpack it again and check that every tensor came back byte-identical; then
# compress it at 4 bits per weight, inspect, verify against the source and decompress.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh default
bin=build/default
work=$(mktemp -d /tmp/epk-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "== generate a small BF16 model (sharded safetensors)"
"$bin/tools/demo/make_demo_model" "$work/model" --layers 4 --hidden 256
echo "== epk pack"
"$bin/tools/epk/epk" pack "$work/model" -o "$work/model.epk"
echo "== epk inspect"
"$bin/tools/epk/epk" inspect "$work/model.epk" | tail -n 6
echo "== epk unpack, then compare every tensor with the source"
"$bin/tools/epk/epk" unpack "$work/model.epk" -o "$work/unpacked.safetensors"
"$bin/tools/epk/epk" pack "$work/unpacked.safetensors" -o "$work/repacked.epk"
"$bin/tools/epk/epk" inspect --json "$work/model.epk" | grep -v '"source"\|"offset"' > "$work/a.json"
"$bin/tools/epk/epk" inspect --json "$work/repacked.epk" | grep -v '"source"\|"offset"' > "$work/b.json"
if cmp -s <(grep '"xxh3"' "$work/a.json" | sort) <(grep '"xxh3"' "$work/b.json" | sort); then
  echo "demo: every tensor round-tripped byte-identical"
else
  echo "demo: tensors differ after the round trip" >&2
  exit 1
fi

echo "== epk compress at 4 bits per weight (2-D linear weights; norms and embeddings stay raw)"
"$bin/tools/epk/epk" compress "$work/model" -o "$work/model-4bpp.epk" --bpp 4 --threads 2 | tail -n 4
echo "== epk inspect (encoding parameters)"
"$bin/tools/epk/epk" inspect "$work/model-4bpp.epk" | grep -A1 'layers.0.mlp.down_proj'
echo "== epk verify --against the source (checksums, every tile, rate and error)"
"$bin/tools/epk/epk" verify "$work/model-4bpp.epk" --against "$work/model" | tail -n 3
echo "== epk decompress"
"$bin/tools/epk/epk" decompress "$work/model-4bpp.epk" -o "$work/decompressed.safetensors" --dtype bf16
