#!/opt/refvenv/bin/python
"""Test vectors from the reference `entropack` package (eager CPU backend) for the epk codec.

Each case writes tests/data/entropack/<name>.safetensors holding:
  input                  the weight in its source dtype [rows, cols]
  entropack_quant_state  the reference's state_dict entry (uint8: u64 length, JSON header, 16-byte aligned buffers)
  ref.rms                float32 [rows]: the row RMS the reference normalised by
  ref.scale              float64 [1]: the lattice scale of the final quantisation (captured, not stored by the format)
  decoded.<dtype>        the reference decoder's output for each output dtype (float32, bfloat16, float16,
                         float8_e4m3fn, float8_e5m2, int8), [rows, cols]
and __metadata__ with the target rate and the reference's actual_bpp.
Run: /opt/refvenv/bin/python scripts/testdata/make_entropack_vectors.py
"""
import os
import sys

import torch
from safetensors.torch import save_file

import entropack as ep
from entropack.schemes.lattice_rans import eager

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "entropack")
OUTPUT_DTYPES = {
    "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
    "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2, "int8": torch.int8,
}


def gauss(rows, cols, seed, dtype=torch.float32, std=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, cols, generator=g) * std).to(dtype)


def student_t(rows, cols, seed, df=3.0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(rows, cols, generator=g)
    # Student-t via normal / sqrt(chi2/df); chi2 from a sum of squared normals keeps the generator seeded
    k = int(df)
    c = torch.randn(rows, cols, k, generator=g).square().sum(-1) / k
    return z / c.sqrt()


def row_scaled(rows, cols, seed):
    w = gauss(rows, cols, seed)
    exps = torch.linspace(-20, 15, rows)
    return w * torch.pow(10.0, exps).unsqueeze(1)


def zero_rows(rows, cols, seed, dtype):
    w = gauss(rows, cols, seed) * 0.02
    w[::3] = 0
    return w.to(dtype)


def int8_weights(rows, cols, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, cols, generator=g) * 40).round().clamp(-127, 127).to(torch.int8)


CASES = [
    ("gauss_bf16_48x160_4bpp", lambda: gauss(48, 160, 1, torch.bfloat16, 0.02), 4.0),
    ("gauss_bf16_32x240_6bpp", lambda: gauss(32, 240, 14, torch.bfloat16, 0.05), 6.0),
    ("gauss_f32_33x100_3bpp", lambda: gauss(33, 100, 2), 3.0),
    ("gauss_f16_1x1000_5bpp", lambda: gauss(1, 1000, 3, torch.float16, 0.1), 5.0),
    ("gauss_f32_1x8_8bpp", lambda: gauss(1, 8, 4), 8.0),
    ("gauss_f32_1x5_6bpp", lambda: gauss(1, 5, 5), 6.0),
    ("zerorows_bf16_48x132_4bpp", lambda: zero_rows(48, 132, 6, torch.bfloat16), 4.0),
    ("rowscale_f32_40x96_6bpp", lambda: row_scaled(40, 96, 7), 6.0),
    ("studentt_f32_40x264_2bpp", lambda: student_t(40, 264, 8), 2.0),
    ("gauss_f32_64x64_8bpp", lambda: gauss(64, 64, 9), 8.0),
    ("gauss_f32_24x200_10bpp", lambda: gauss(24, 200, 10), 10.0),
    ("int8_i8_32x72_5bpp", lambda: int8_weights(32, 72, 11), 5.0),
    ("zeros_bf16_4x16_4bpp", lambda: torch.zeros(4, 16, dtype=torch.bfloat16), 4.0),
    ("gauss_f16_17x43_7bpp", lambda: gauss(17, 43, 13, torch.float16), 7.0),
]


def run_case(name, make, target):
    w = make()
    captured = {}
    original = eager._quantize_at

    def spy(X, scale):
        captured["scale"] = float(scale)
        return original(X, scale)

    eager._quantize_at = spy
    try:
        cfg = ep.LatticeRANSConfig(target_bpp=target, execution_backend="eager")
        ct = ep.compress(w, cfg)
    finally:
        eager._quantize_at = original
    if ct.compress_method != "lattice_rans":
        raise SystemExit(f"{name}: reference fell back to {ct.compress_method}")
    sd = ct.state_dict()
    tensors = {"input": w.contiguous(), "entropack_quant_state": sd["entropack_quant_state"].clone()}
    x = w.float()
    pad = -x.shape[1] % 8
    if pad:
        x = torch.cat([x, x.new_zeros(x.shape[0], pad)], dim=1)
    rms, _ = eager._rms_and_X(x)
    tensors["ref.rms"] = rms.reshape(-1).contiguous()
    tensors["ref.scale"] = torch.tensor([captured["scale"]], dtype=torch.float64)
    for dname, dtype in OUTPUT_DTYPES.items():
        out = ct.scheme.decode(ct.buffers, shape=tuple(ct.shape), dtype=dtype, config=cfg)
        tensors[f"decoded.{dname}"] = out.contiguous()
    meta = {"target_bpp": repr(target), "actual_bpp": repr(ct.actual_bpp), "entropack": ep.__version__
            if hasattr(ep, "__version__") else "0.1.5"}
    path = os.path.join(OUT, name + ".safetensors")
    save_file(tensors, path, metadata=meta)
    layout = ct.buffers["layout"].tolist()
    print(f"{name}: {tuple(w.shape)} {w.dtype} target {target} actual {ct.actual_bpp:.3f} layout {layout} "
          f"scale {captured['scale']:.6g} tiles {ct.buffers['states'].shape[0]} -> {os.path.getsize(path)} B")


def main():
    os.makedirs(OUT, exist_ok=True)
    only = set(sys.argv[1:])
    for name, make, target in CASES:
        if not only or name in only:
            run_case(name, make, target)


if __name__ == "__main__":
    main()
