#!/usr/bin/env python3
"""scripts/calibration/quantizers.py (NumPy only) against plain reference loops on synthetic matrices.

    python3 tests/calibration/quantizers_test.py     (or pytest)
"""

import sys
import unittest
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "calibration"))
import quantizers as qz  # noqa: E402


def nf4_loop(w, block=64):
    """bench/bench_layers.h's nf4_error loop, returning the dequantized values."""
    flat = w.reshape(-1).astype(np.float32)
    out = np.zeros_like(flat)
    for b in range(0, flat.size, block):
        x = flat[b:b + block]
        absmax = np.float32(np.abs(x).max())
        for i, v in enumerate(x):
            if absmax > 0:
                n = v / absmax
                out[b + i] = qz.NF4_CODE[int(np.argmin([abs(n - c) for c in qz.NF4_CODE]))] * absmax
    return out.reshape(w.shape)


def rtn_loop(w, bits=4, group=128):
    """GPTQ's group quantizer, one weight at a time."""
    maxq = 2**bits - 1
    out = np.zeros(w.shape)
    for r in range(w.shape[0]):
        for g in range(0, w.shape[1], group):
            x = w[r, g:g + group].astype(np.float64)
            lo, hi = min(x.min(), 0.0), max(x.max(), 0.0)
            if lo == 0 and hi == 0:
                lo, hi = -1.0, 1.0
            s = float(np.float16((hi - lo) / maxq))
            z = min(max(round(-lo / s), 0), maxq)
            for i, v in enumerate(x):
                out[r, g + i] = s * (min(max(round(v / s) + z, 0), maxq) - z)
    return out


class Nf4Test(unittest.TestCase):
    def test_matches_loop_and_code_book(self):
        rng = np.random.default_rng(1)
        w = (rng.standard_t(3, size=(12, 192)) * 0.02).astype(np.float32)
        w[3, :64] = 0  # an all-zero block stays zero
        q = qz.nf4(w)
        np.testing.assert_array_equal(q, nf4_loop(w))
        blocks, qb = w.reshape(-1, 64), q.reshape(-1, 64)
        for x, y in zip(blocks, qb):
            absmax = np.abs(x).max()
            if absmax == 0:
                self.assertTrue((y == 0).all())
                continue
            # Every value is a code book entry times the block's absmax, and the absmax itself is kept exactly.
            self.assertTrue(np.isin(y, qz.NF4_CODE * absmax).all())
            self.assertEqual(np.abs(y).max(), absmax)


class GptqTest(unittest.TestCase):
    def test_rtn_matches_loop(self):
        rng = np.random.default_rng(2)
        w = rng.normal(size=(6, 256)) * 0.05
        np.testing.assert_array_equal(qz.rtn_groups(w), rtn_loop(w))

    def test_identity_h_is_rtn(self):
        # H = I: U is diagonal, so no error reaches another column and the stable sort keeps the order.
        rng = np.random.default_rng(3)
        w = rng.normal(size=(16, 384)) * 0.05
        for act_order in (False, True):
            np.testing.assert_array_equal(qz.gptq(w, np.eye(384), act_order=act_order), qz.rtn_groups(w))

    def test_feedback_lowers_output_error(self):
        # A correlated H: GPTQ's H-weighted error tr((W-Q) H (W-Q)^T) is below round-to-nearest's.
        rng = np.random.default_rng(4)
        cols = 256
        x = rng.normal(size=(2048, 32)) @ rng.normal(size=(32, cols)) + 0.1 * rng.normal(size=(2048, cols))
        x *= np.exp(rng.normal(size=cols))  # per-input scales, so act-order has an order to follow
        h = x.T @ x
        w = rng.normal(size=(64, cols)) * 0.05

        def herr(q):
            d = w - q
            return np.einsum("ij,jk,ik->", d, h, d)

        plain = herr(qz.rtn_groups(w))
        for act_order in (False, True):
            self.assertLess(herr(qz.gptq(w, h, act_order=act_order)), 0.7 * plain)

    def test_values_on_group_grid(self):
        # Each group's values (in processing order) lie on at most 16 levels.
        rng = np.random.default_rng(5)
        x = rng.normal(size=(512, 256)) * np.exp(rng.normal(size=256))
        w = rng.normal(size=(8, 256))
        q = qz.gptq(w, x.T @ x, act_order=True)
        perm = np.argsort(-np.diag(x.T @ x), kind="stable")
        for g in range(0, 256, 128):
            for r in range(8):
                self.assertLessEqual(len(np.unique(np.round(q[r, perm[g:g + 128]], 12))), 16)


if __name__ == "__main__":
    unittest.main()
