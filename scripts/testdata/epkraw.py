"""Writes one reference-compressed lattice_rans tensor as an .epkraw file for the C++ GPU decoder tests and bench.

Layout (little-endian): magic b"EPKRAW01"; u32 rows, cols, padded_cols, prob_bits, tile_symbols, n_words, n_tiles,
n_freq, n_outputs, reserved; payload u16[n_words]; offsets u32[n_tiles+1]; states u32[n_tiles*32]; stream_meta
i32[17*4]; freq_tables u16[n_freq]; scales f32[rows]; then n_outputs records (u32 format, u32 reserved, u64 nbytes,
bytes): the reference decoder's output in that format (0 bf16, 1 fp16, 2 fp32, 3 fp8 e4m3, 4 fp8 e5m2), row-major
[rows, cols]. Read by tests/codec/cuda/raw_stream_file.h.
"""
import struct

import numpy as np
import torch

FORMATS = {"bf16": 0, "fp16": 1, "fp32": 2, "fp8_e4m3": 3, "fp8_e5m2": 4}


def reference_outputs(decoded_f32: torch.Tensor, names) -> dict:
    """The other formats from the reference's fp32 decode, converted the way its CUDA store kinds do it."""
    x = decoded_f32.float().cpu()
    conv = {
        "fp32": lambda: x,
        "bf16": lambda: x.to(torch.bfloat16),
        "fp16": lambda: x.clamp(-65504.0, 65504.0).to(torch.float16),
        "fp8_e4m3": lambda: x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn),
        "fp8_e5m2": lambda: x.clamp(-57344.0, 57344.0).to(torch.float8_e5m2),
    }
    return {name: conv[name]() for name in names}


def _bytes(t: torch.Tensor) -> bytes:
    t = t.contiguous().cpu()
    return t.view(torch.uint8).numpy().tobytes() if t.element_size() == 1 else t.view(
        {1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()]).numpy().tobytes()


def write(path, ct, rows: int, cols: int, outputs: dict) -> None:
    assert ct.compress_method == "lattice_rans", ct.compress_method
    b = {k: v.detach().cpu() for k, v in ct.buffers.items()}
    padded, prob_bits, tile_symbols = (int(v) for v in b["layout"].tolist())
    payload = b["payload"].numpy().astype("<u2")
    offsets = b["offsets"].numpy().astype("<u4")
    states = b["states"].numpy().astype("<u4").reshape(-1)
    meta = b["stream_meta"].numpy().astype("<i4").reshape(-1)
    freq = b["freq_tables"].numpy().astype("<u2")
    scales = b["scales"].numpy().astype("<f4")
    n_tiles = offsets.size - 1
    assert states.size == n_tiles * 32 and meta.size == 68 and scales.size == rows
    with open(path, "wb") as f:
        f.write(b"EPKRAW01")
        f.write(struct.pack("<10I", rows, cols, padded, prob_bits, tile_symbols, payload.size, n_tiles, freq.size,
                            len(outputs), 0))
        for arr in (payload, offsets, states, meta, freq, scales):
            f.write(arr.tobytes())
        for name, tensor in outputs.items():
            data = _bytes(tensor)
            assert len(data) == rows * cols * tensor.element_size()
            f.write(struct.pack("<IIQ", FORMATS[name], 0, len(data)))
            f.write(data)
