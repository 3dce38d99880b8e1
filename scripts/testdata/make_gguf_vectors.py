#!/usr/bin/env python3
"""Writes tests/data/gguf/gguf_types.gguf: GGUF block types beside gguf-py's own dequantization of each.

Run: /opt/refvenv/bin/python scripts/testdata/make_gguf_vectors.py [--out DIR]   (needs gguf and numpy only)
The `reference`-labelled test regenerates the file into a temporary DIR and requires identical bytes.

Every tensor NAME (a ggml block type, 2-D, blocks along the contiguous axis) has a tensor NAME.ref beside it: F32,
gguf.quants.dequantize(NAME's bytes), which the C++ dequantizer must reproduce bit for bit. Two sources of blocks:
  - gguf.quants.quantize of Gaussian rows (types gguf-py can quantize: Q5_0, Q5_1), one block all zero;
  - random bytes with the f16 scale fields overwritten (every type, so every code, sub-block scale and high-bit
    pattern occurs), among them edge values: +-0, the smallest subnormal, the largest finite f16, negative scales
    and mins.
"""
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "gguf")

# f16 bit patterns the random blocks' scale fields cycle through after their random values.
EDGE_F16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00]


def main():
    global OUT
    if len(sys.argv) == 3 and sys.argv[1] == "--out":
        OUT = sys.argv[2]
    os.makedirs(OUT, exist_ok=True)
    import gguf
    from gguf import GGMLQuantizationType as T

    rng = np.random.default_rng(20261201)
    path = os.path.join(OUT, "gguf_types.gguf")
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("epk gguf type vectors")

    def add(name, raw, qtype):
        writer.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qtype)
        ref = gguf.quants.dequantize(raw, qtype).astype(np.float32)
        writer.add_tensor(name + ".ref", ref)

    def add_quantized(name, rows, cols, qtype):
        x = (rng.standard_normal((rows, cols)) * 0.1).astype(np.float32)
        x[0, :32] = 0.0  # an all-zero block (d = 0)
        x[-1, -32:] *= 1000.0  # a block whose scale needs most of f16's range
        add(name, gguf.quants.quantize(x, qtype), qtype)

    def add_random(name, rows, cols, qtype, f16_offsets):
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        n_blocks = cols // block
        raw = rng.integers(0, 256, size=(rows * n_blocks, size), dtype=np.uint8)
        for k, off in enumerate(f16_offsets):
            d = (rng.standard_normal(rows * n_blocks) * 0.01).astype(np.float16).view(np.uint16)
            for i, e in enumerate(EDGE_F16):  # the first blocks take the edge values, shifted per field
                d[(i + k) % len(d)] = e
            raw[:, off:off + 2] = d.view(np.uint8).reshape(-1, 2)
        add(name, raw.reshape(rows, n_blocks * size), qtype)

    add_quantized("q5_0", 3, 96, T.Q5_0)
    add_quantized("q5_1", 3, 96, T.Q5_1)
    add_random("q5_0.rand", 4, 64, T.Q5_0, [0])
    add_random("q5_1.rand", 4, 64, T.Q5_1, [0, 2])
    add_random("q2_k", 4, 1024, T.Q2_K, [80, 82])
    add_random("q3_k", 4, 1024, T.Q3_K, [108])
    add_random("iq4_nl", 5, 64, T.IQ4_NL, [0])
    add_random("iq4_xs", 4, 1024, T.IQ4_XS, [0])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
