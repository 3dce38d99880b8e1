"""The baselines issue 30's perplexity table compares calibrated epk against, as quantize-then-dequantize in NumPy
(no torch: tests/calibration/quantizers_test.py runs them in CI).

- nf4: bitsandbytes' NF4 (its 16-value code book, blocks of 64 consecutive weights of the flattened row-major
  tensor, an FP32 absmax per block): 4 + 32/64 = 4.5 bits per weight.
- gptq: GPTQ (Frantar et al. 2022) with the reference implementation's choices: 4-bit asymmetric min/max per group of
  128 columns (the range always contains 0), act-order (columns by diag(H) descending), damping 1% of mean diag(H),
  the upper Cholesky factor of H^-1, column-by-column rounding with error feedback, lazy updates in blocks of 128.
  Stored: 4 bits per weight plus an FP16 scale and a 16-bit zero per group of 128 = 4.25 bits per weight (act-order's
  per-column group index, 32 bits per column, is not counted, as GPTQ's papers do not count it).
- rtn_groups: round-to-nearest with GPTQ's group quantizer and no feedback (GPTQ with H = identity must equal it).
"""

import numpy as np

# bitsandbytes' NF4 code book (functional.py, get_4bit_type("nf4"); the QLoRA paper's appendix); also in
# bench/bench_layers.h.
NF4_CODE = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                     -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                     0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                     0.7229568362236023, 1.0], dtype=np.float32)


def nf4(w: np.ndarray, block: int = 64) -> np.ndarray:
    """w quantized to NF4 and dequantized (F32, w's shape). Each block's values are absmax * the code value nearest
    to w / absmax (the nearest in F32; bitsandbytes' comparison tree picks the same one except at exact midpoints)."""
    flat = np.asarray(w, dtype=np.float32).reshape(-1)
    pad = -flat.size % block
    x = np.concatenate([flat, np.zeros(pad, np.float32)]).reshape(-1, block)
    absmax = np.abs(x).max(axis=1, keepdims=True)
    n = np.divide(x, absmax, out=np.zeros_like(x), where=absmax > 0)
    idx = np.abs(n[..., None] - NF4_CODE).argmin(axis=-1)
    q = NF4_CODE[idx] * absmax
    return q.reshape(-1)[:flat.size].reshape(np.shape(w))


def _group_params(w: np.ndarray, maxq: int):
    """GPTQ's Quantizer.find_params per row of w [rows, g]: the range [min(w, 0), max(w, 0)] over maxq steps; the
    scale as FP16 (what is stored), the zero an integer in [0, maxq]. A row of zeros gets the range [-1, 1]."""
    lo = np.minimum(w.min(axis=1), 0.0)
    hi = np.maximum(w.max(axis=1), 0.0)
    both0 = (lo == 0) & (hi == 0)
    lo, hi = np.where(both0, -1.0, lo), np.where(both0, 1.0, hi)
    scale = ((hi - lo) / maxq).astype(np.float16).astype(np.float64)
    scale = np.where(scale > 0, scale, np.finfo(np.float16).tiny)
    zero = np.clip(np.round(-lo / scale), 0, maxq)
    return scale[:, None], zero[:, None]


def _quantize(w: np.ndarray, scale: np.ndarray, zero: np.ndarray, maxq: int) -> np.ndarray:
    q = np.clip(np.round(w / scale) + zero, 0, maxq)
    return scale * (q - zero)


def rtn_groups(w: np.ndarray, bits: int = 4, group: int = 128) -> np.ndarray:
    """Round-to-nearest with GPTQ's per-group asymmetric quantizer over consecutive columns; F64."""
    w = np.asarray(w, dtype=np.float64)
    maxq = 2**bits - 1
    out = np.empty_like(w)
    for g in range(0, w.shape[1], group):
        s, z = _group_params(w[:, g:g + group], maxq)
        out[:, g:g + group] = _quantize(w[:, g:g + group], s, z, maxq)
    return out


def gptq(w: np.ndarray, h: np.ndarray, bits: int = 4, group: int = 128, act_order: bool = True,
         damp: float = 0.01, block: int = 128) -> np.ndarray:
    """w [rows, cols] quantized by GPTQ against H [cols, cols] (sum x x^T of the layer's inputs), dequantized (F64).

    Invariant: column j is rounded after the error of every earlier column (in the processing order) was fed back
    into it through U = chol(H^-1, upper): W[:, k] -= err_j * U[j, k] / U[j, j] for k > j. Groups are consecutive in
    the processing order (so with act-order a group holds the columns of similar diag(H)), their ranges taken from
    the feedback-updated weights when the group starts. block must be a multiple of group or group of block, so a
    group starts where the block's columns are current."""
    if block % group and group % block:
        raise ValueError(f"block {block} and group {group}: one must divide the other")
    w = np.array(w, dtype=np.float64)
    h = np.array(h, dtype=np.float64)
    rows, cols = w.shape
    maxq = 2**bits - 1
    dead = np.diag(h) == 0  # inputs that never fired: weight irrelevant to the output, as GPTQ zeroes it
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    perm = np.argsort(-np.diag(h), kind="stable") if act_order else np.arange(cols)
    w, h = w[:, perm], h[perm][:, perm]
    h[np.diag_indices(cols)] += damp * np.mean(np.diag(h))
    hinv = np.linalg.inv(np.linalg.cholesky(h))        # L^-1, so H^-1 = L^-T L^-1
    u = np.linalg.cholesky(hinv.T @ hinv).T             # upper U with U^T U = H^-1
    q = np.zeros_like(w)
    scale = zero = None
    for b0 in range(0, cols, block):
        b1 = min(cols, b0 + block)
        w1 = w[:, b0:b1].copy()
        err = np.zeros_like(w1)
        u1 = u[b0:b1, b0:b1]
        for i in range(b1 - b0):
            if (b0 + i) % group == 0:
                # The group's columns from the current weights: those in this block are in w1, later ones in w.
                g1 = min(cols, b0 + i + group)
                cur = np.concatenate([w1[:, i:], w[:, b1:g1]], axis=1)[:, :g1 - b0 - i]
                scale, zero = _group_params(cur, maxq)
            col = w1[:, i]
            qc = _quantize(col[:, None], scale, zero, maxq)[:, 0]
            q[:, b0 + i] = qc
            e = (col - qc) / u1[i, i]
            w1[:, i:] -= np.outer(e, u1[i, i:])
            err[:, i] = e
        w[:, b1:] -= err @ u[b0:b1, b1:]
    out = np.empty_like(q)
    out[:, perm] = q
    return out
