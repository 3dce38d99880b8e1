#!/usr/bin/env bash
# Here (the build machine, which has a package registry): bitsandbytes' wheel for the prefill benchmark's nf4 setup,
# trimmed to the one native library the GPU machine loads, so that it fits the device tool's 64 MiB carry.
#   bash scripts/gpu/trim_bnb_wheel.sh [DEST] [VERSION]
# DEST: default the main checkout's .whl/ (ignored; stage.sh copies it to STAGE/wheels, prefill_run.sh installs it).
# VERSION: default 0.50.2 (its manylinux x86_64 wheel carries libbitsandbytes_cuda130.so: CUDA 13.0, torch >= 2.4).
# KEEP (default cuda130): the space-separated library suffixes kept, e.g. "cuda130 cpu".
# bitsandbytes picks libbitsandbytes_cuda<torch.version.cuda>.so (BNB_CUDA_VERSION overrides), so a wheel without the
# machine's CUDA version fails at import with bitsandbytes' own message rather than running something else.
# The RECORD keeps the hashes of the files left (unchanged) and drops the removed ones, so pip installs it as usual.
set -euo pipefail
dest="${1:-/work/main/.whl}"
version="${2:-0.50.2}"
keep="${KEEP:-cuda130}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download "bitsandbytes==$version" --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_24_x86_64 -d "$tmp/dl" >/dev/null
src=("$tmp"/dl/bitsandbytes-"$version"-*manylinux*x86_64.whl)
[[ -f "${src[0]}" ]] || { echo "trim_bnb_wheel: no manylinux x86_64 wheel of bitsandbytes $version" >&2; exit 1; }
mkdir -p "$dest"
python3 - "${src[0]}" "$dest/$(basename "${src[0]}")" "$keep" <<'PY'
import os, re, sys, zipfile

src, dst, keep = sys.argv[1], sys.argv[2], sys.argv[3].split()
lib = re.compile(r"^bitsandbytes/libbitsandbytes_(\w+)\.(so|dylib|dll)$")
with zipfile.ZipFile(src) as zin:
    names = zin.namelist()
    dropped = {n for n in names if (m := lib.match(n)) and m.group(1) not in keep}
    kept_libs = [n for n in names if lib.match(n) and n not in dropped]
    missing = [k for k in keep if not any(lib.match(n).group(1) == k for n in kept_libs)]
    if missing:
        sys.exit(f"trim_bnb_wheel: {src} has no library for {missing}")
    record = next(n for n in names if n.endswith(".dist-info/RECORD"))
    with zipfile.ZipFile(dst + ".partial", "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.filename in dropped:
                continue
            data = zin.read(info)
            if info.filename == record:
                lines = data.decode().splitlines(keepends=True)
                data = "".join(l for l in lines if l.split(",", 1)[0] not in dropped).encode()
            zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
os.replace(dst + ".partial", dst)
print(f"{dst}: kept {', '.join(kept_libs)}; dropped {len(dropped)} libraries")
PY
ls -l "$dest/$(basename "${src[0]}")"
