#!/usr/bin/env bash
# The README's demo command: set up, build, then run the main job on an embedded default: generate a small model,
# pack it into an .epk file, inspect it, unpack it again and check that every tensor came back byte-identical; then
# compress it at 4 bits per weight, inspect, verify against the source and decompress; then serve the compressed model
# with epkd (temporary socket, embedded config), fetch every tensor through a client, print the cache occupancy and
# stop epkd with SIGTERM.
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

# ---- serve it: epkd on a temporary socket with an embedded default config, one client fetching every layer ----
# The model served is the one compressed above at 4 bits per weight.
served_epk=$work/model-4bpp.epk
cat > "$work/epkd.toml" <<TOML
socket = "$work/epkd.sock"
budget_mb = 64
cpu = true
threads = 2
log_level = "warn"

[[model]]
name = "demo"
path = "$served_epk"
TOML
echo "== epkd --config (serving $(basename "$served_epk"))"
"$bin/daemon/epkd" --config "$work/epkd.toml" 2> "$work/epkd.log" &
epkd_pid=$!
trap 'kill -KILL "$epkd_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  "$bin/tools/epk/epk" status --socket "$work/epkd.sock" > /dev/null 2>&1 && break
  kill -0 "$epkd_pid" 2>/dev/null || { cat "$work/epkd.log" >&2; exit 1; }
  sleep 0.1
done
mapfile -t names < <("$bin/tools/epk/epk" inspect "$served_epk" | awk 'NR > 1 && /^[^ ]/ && !/^total:/ { print $1 }')
echo "== a client fetches all ${#names[@]} tensors as dense:bf16 (epk get)"
"$bin/tools/epk/epk" get --socket "$work/epkd.sock" demo "${names[@]}" --layout dense:bf16 -o "$work/served.safetensors"
"$bin/tools/epk/epk" pack "$work/served.safetensors" -o "$work/served.epk" > /dev/null
"$bin/tools/epk/epk" pack "$work/decompressed.safetensors" -o "$work/decompressed.epk" > /dev/null
if cmp -s <("$bin/tools/epk/epk" inspect --json "$work/served.epk" | grep '"xxh3"' | sort) \
          <("$bin/tools/epk/epk" inspect --json "$work/decompressed.epk" | grep '"xxh3"' | sort); then
  echo "demo: every served tensor is bit-identical to epk decompress's"
else
  echo "demo: served tensors differ from epk decompress's" >&2
  exit 1
fi
echo "== cache occupancy (epk status)"
"$bin/tools/epk/epk" status --socket "$work/epkd.sock"
echo "== SIGTERM"
kill -TERM "$epkd_pid"
if wait "$epkd_pid"; then
  echo "demo: epkd served every tensor and stopped cleanly"
else
  echo "demo: epkd exited with status $?" >&2
  cat "$work/epkd.log" >&2
  exit 1
fi
