#!/opt/refvenv/bin/python
"""Reference outputs of the entropack 0.1.5 building blocks, for unit tests of codec/lattice and codec/model:
  tests/data/entropack_units/lattice.safetensors: y float32 [N,8] (tie-heavy inputs: half-integers, equidistant
      cosets, -0, equal residuals, bf16 grids, random), point float32 [N,8] (nearest_e8), c int64 [N], z int64 [N,7],
      m int64 [N] (point_to_fields).
  tests/data/entropack_units/normalize.safetensors: counts.K int64 [n], table_size.K int64 [1], freq.K uint16 [n]
      (rans.normalize_freq), and estimate.K float64 [1] (coded_bytes of a 17-table set, see below).
Run: /opt/refvenv/bin/python scripts/testdata/make_entropack_model_vectors.py
"""
import os

import numpy as np
import torch
from safetensors.torch import save_file

from entropack.schemes.lattice_rans import eager, rans

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "entropack_units")


def lattice_inputs():
    g = torch.Generator().manual_seed(5)
    rows = []
    rows.append(torch.full((8,), 0.25))                     # equidistant from both cosets
    rows.append(torch.full((8,), 0.5))                      # rint ties everywhere
    rows.append(torch.tensor([0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.5, 0.5]))
    rows.append(torch.tensor([-0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.2]))
    rows.append(torch.tensor([0.3, -0.3, 0.3, -0.3, 0.0, 0.0, 0.0, 1.0]))   # equal |residual| ties, odd parity
    rows.append(torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]))     # odd parity, zero residuals
    rows.append(torch.tensor([-1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]))
    rows.append(torch.tensor([0.75, 0.75, 0.75, 0.75, 0.75, 0.75, 0.75, 0.75]))
    rows.append(torch.tensor([-0.75, 0.25, -0.25, 0.75, 1.25, -1.25, 0.25, -0.75]))
    rows.append(torch.tensor([1e6 + 0.5, -3.5, 2.0, 0.5, 0.5, -0.5, 7.0, 1.0]))
    for k in range(200):   # quarter-integer grids: many exact ties between and within cosets
        rows.append((torch.randint(-12, 13, (8,), generator=g).float()) / 4.0)
    for k in range(200):   # bf16-valued inputs
        rows.append((torch.randn(8, generator=g) * 3).to(torch.bfloat16).float())
    for k in range(200):
        rows.append(torch.randn(8, generator=g) * 5)
    return torch.stack(rows).contiguous()


def main():
    os.makedirs(OUT, exist_ok=True)
    y = lattice_inputs()
    p = eager.nearest_e8(y)
    c, z, m = eager.point_to_fields(p)
    save_file({"y": y, "point": p.contiguous(), "c": c.contiguous(), "z": z.contiguous(), "m": m.contiguous()},
              os.path.join(OUT, "lattice.safetensors"))

    rng = np.random.default_rng(7)
    t = {}
    cases = [
        (np.array([5]), 2048), (np.array([1, 1]), 2048), (np.array([1, 0, 0, 3, 0, 1]), 512),
        (np.array([1000000, 1, 1, 1, 1]), 2048), (np.array([3, 3, 3]), 2048),
        (np.ones(2048, dtype=np.int64), 2048), (np.ones(700, dtype=np.int64) * 3 + np.arange(700) % 5, 1024),
    ]
    for n in (3, 17, 60, 300):
        cases.append((rng.geometric(0.05, size=n) * (rng.random(n) > 0.2), 2048))
        cases.append((np.round(1e6 * np.exp(-0.5 * ((np.arange(n) - n / 2) / (n / 8)) ** 2)).astype(np.int64), 4096))
    for k, (counts, table_size) in enumerate(cases):
        counts = np.asarray(counts, dtype=np.int64)
        if counts.sum() == 0:
            counts[0] = 1
        t[f"counts.{k}"] = torch.from_numpy(counts)
        t[f"table_size.{k}"] = torch.tensor([table_size], dtype=torch.int64)
        t[f"freq.{k}"] = torch.from_numpy(rans.normalize_freq(counts, table_size).astype(np.int64)).to(torch.int64)
    # Size estimate of the fields of a real quantisation (17 tables), at three precisions and two tile sizes.
    x = torch.randn(96, 256, generator=torch.Generator().manual_seed(3))
    rms, X = eager._rms_and_X(x)
    cq, zq, mq = eager._quantize_at(X, 0.4)
    t["est.c"] = torch.from_numpy(cq.astype(np.uint8))
    t["est.fields"] = torch.from_numpy(eager._field_matrix(zq, mq).astype(np.int16)).contiguous()
    counts, sizes, _, _ = eager._stream_stats(eager._coord_streams(cq, zq, mq))
    est = []
    for pb, tile in ((11, 16384), (12, 4096), (9, 32768)):
        est.append(eager._analytic_bytes_from_counts(counts, sizes, 96, pb, tile))
    t["est.bytes"] = torch.tensor(est, dtype=torch.float64)
    save_file(t, os.path.join(OUT, "normalize.safetensors"))
    print("ok", {k: os.path.getsize(os.path.join(OUT, k)) for k in os.listdir(OUT)})


if __name__ == "__main__":
    main()
