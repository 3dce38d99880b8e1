#!/usr/bin/env python3
"""The reference package's own GPU encoder (entropack, execution_backend="cuda") on the tensors gpu_encode_bench
times: the 10240x3840 bf16 layer and the Llama-3-8B-shaped set (random bf16, sigma 0.02, on the device), at one rate.
Prints RESULT lines in gpu_encode_bench's units (G weights/s). The input is already on the device (the reference's
own path); the clock stops after torch.cuda.synchronize()."""
import argparse
import time

import torch
import entropack


def gen(rows, cols, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(rows, cols, device="cuda", generator=g) * 0.02).to(torch.bfloat16)


def timed(w, cfg):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    c = entropack.compress(w, cfg)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bpp", type=float, default=4.0)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--max-seconds", type=float, default=60.0, help="stop the model set after this much encode time")
    a = ap.parse_args()
    cfg = entropack.LatticeRANSConfig(target_bpp=a.bpp, execution_backend="cuda")
    print(f"entropack {entropack.__version__} on {torch.cuda.get_device_name(0)}; target {a.bpp} bpp")
    w = gen(10240, 3840, 1)
    timed(w, cfg)  # warm-up: kernel compilation, allocations
    best = min(timed(w, cfg)[0] for _ in range(3))
    n = 10240 * 3840
    print(f"RESULT ref_layer_10240x3840 {best:.4f} s = {n / best / 1e9:.3f} Gw/s")
    shapes = [(4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096), (14336, 4096), (14336, 4096), (4096, 14336)]
    total = 0.0
    weights = 0
    seed = 100
    done = 0
    for _ in range(a.layers):
        for r, c in shapes:
            seed += 1
            w = gen(r, c, seed)
            t, _ = timed(w, cfg)
            total += t
            weights += r * c
            done += 1
            del w
        if total > a.max_seconds:
            break
    print(f"RESULT ref_llama8b_shaped {done} tensors, {weights / 1e9:.3f} G weights in {total:.3f} s = "
          f"{weights / total / 1e9:.3f} Gw/s")


if __name__ == "__main__":
    main()
