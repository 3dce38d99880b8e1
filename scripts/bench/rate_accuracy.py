#!/usr/bin/env python3
"""How close `epk compress --bpp R` lands to R, tensor by tensor, on small and mid-sized layers (where the index entry
and the tables weigh most): writes a float32 checkpoint of Gaussian layers (every other one with three columns 20x
wider, as attention projections have), compresses it at 2..8 bpp on the CPU with the error ceiling off, and prints per
rate the mean and largest |stored / target - 1| over the lattice-rans tensors (stored as the table prints it, 3
decimals) and the seconds compress took.

  scripts/bench/rate_accuracy.py EPK_BINARY WORK_DIR [--shapes small|mid]

small: 32 layers of 24..300 rows x 136..1000 columns; mid: 12 layers from 64x64 to 4096x512. Needs numpy.
"""
import argparse
import json
import os
import struct
import subprocess
import time

import numpy as np

SHAPES = {
    "small": [(r, c) for r in (24, 40, 50, 72, 96, 128, 200, 300) for c in (136, 264, 520, 1000)],
    "mid": [(64, 64), (32, 384), (100, 200), (128, 320), (50, 520), (256, 256), (200, 520), (520, 200), (512, 512),
            (1024, 1024), (2048, 1024), (4096, 512)],
}


def write_checkpoint(path, shapes):
    rng = np.random.default_rng(5)
    header, blobs, offset = {}, [], 0
    for k, shape in enumerate(shapes):
        a = (rng.standard_normal(shape) * 0.02).astype(np.float32)
        if k % 2 == 1:
            a[:, :3] *= 20
        b = a.tobytes()
        header[f"t{k:02d}_{shape[0]}x{shape[1]}.weight"] = {
            "dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("epk")
    ap.add_argument("work")
    ap.add_argument("--shapes", choices=sorted(SHAPES), default="small")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    src = os.path.join(args.work, f"{args.shapes}.safetensors")
    write_checkpoint(src, SHAPES[args.shapes])
    for bpp in range(2, 9):
        t0 = time.monotonic()
        out = subprocess.run([args.epk, "compress", src, "-o", os.path.join(args.work, "out.epk"), "--bpp", str(bpp),
                              "--max-error", "1", "--device", "cpu", "--threads", "2"],
                             check=True, capture_output=True, text=True).stdout
        seconds = time.monotonic() - t0
        devs = []
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 4 and f[1] == "lattice-rans":
                devs.append(abs(float(f[3]) / float(f[2]) - 1.0))
        print(f"{bpp} bpp: {len(devs)} tensors, mean {100 * np.mean(devs):.3f}%, max {100 * max(devs):.3f}%, "
              f"over 0.2%: {sum(d > 0.002 for d in devs)}, {seconds:.2f} s")


if __name__ == "__main__":
    main()
