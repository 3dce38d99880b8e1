#!/usr/bin/env python3
"""Writes the quantized-layout test vectors under tests/data/layouts/.

Run with the reference environment:  /opt/refvenv/bin/python scripts/testdata/make_layout_vectors.py [--out DIR]
(the `reference`-labelled test regenerates them into a temporary DIR and requires identical bytes).
Each case is a small safetensors file: the packed tensors under their checkpoint names, the logical inputs the packer
started from (logical.*), and the reference library's own dequantized output (ref.*). __metadata__["params"] holds the parameters as JSON.

Sources of truth:
  - GPTQ: AutoGPTQ's QuantLinear.pack loops (including the 3-bit straddle code) and its torch dequantization
    (shift, +1 for v1, mask, scales[g_idx] * (w - z[g_idx]) in fp16), reproduced here in numpy/torch.
  - AWQ: AutoAWQ's WQLinear_GEMM.from_linear packing and utils/packing_utils.dequantize_gemm, reproduced; the GEMV
    layout from WQLinear_GEMV.from_linear (natural slot order along K, calculate_zeros_width, zero-padded scales),
    reproduced, with the GEMM packing of the same codes beside it (gemm.*). AutoAWQ has no CPU dequantization of
    GEMV (only its CUDA kernel): ref.dequant is (q - z) * s in fp16, as dequantize_gemm computes it.
  - Marlin: vLLM's marlin_utils_test (get_weight_perm, marlin_permute_weights, marlin_weights,
    marlin_permute_scales, argsort of g_idx for act-order), reproduced. Marlin has no CPU dequantization to compare
    against: the vectors are the packed bytes.
  - compressed-tensors: the library's own pack_to_int32 (helpers.py, loaded by path: the package __init__ needs
    loguru/pydantic), and its _dequantize formula reproduced ((q - zp) * scale in the scale dtype).
  - GGUF: gguf-py's quants.quantize / quants.dequantize and GGUFWriter (the file itself).
  - bitsandbytes: quantize_4bit / dequantize_4bit (CPU) and QuantState.as_dict(packed=True).
"""
import importlib.util
import json
import os
import sys
import zlib

import numpy as np
import torch
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "layouts")


def save(name, tensors, meta):
    path = os.path.join(OUT, name + ".safetensors")
    # One metadata key: safetensors orders several keys by a randomly seeded hash map, which breaks reproducibility.
    save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata={"params": json.dumps(meta, sort_keys=True)})
    print(f"{path}: {os.path.getsize(path)} bytes")


def rtn(w, bits, group, sym, g_idx):
    """Round-to-nearest codes for w [K, N] (fp32) with per-(group, column) fp16 scales and integer zeros."""
    K, N = w.shape
    groups = int(g_idx.max()) + 1
    maxq = 2 ** bits - 1
    scales = np.zeros((groups, N), np.float16)
    zeros = np.zeros((groups, N), np.int64)
    for g in range(groups):
        rows = w[g_idx == g]
        lo, hi = np.minimum(rows.min(0), 0), np.maximum(rows.max(0), 0)
        if sym:
            amax = np.maximum(np.abs(lo), hi)
            s = np.where(amax == 0, 1, 2 * amax / maxq)
            z = np.full(N, (maxq + 1) // 2)
        else:
            s = np.where(hi == lo, 1, (hi - lo) / maxq)
            z = np.clip(np.round(-lo / s), 0, maxq)
        scales[g] = s.astype(np.float16)
        zeros[g] = z
    s_rows = scales[g_idx].astype(np.float32)
    q = np.clip(np.round(w / s_rows) + zeros[g_idx], 0, maxq).astype(np.int64)
    return q, scales, zeros


# ---------------------------------------------------------------------------------------------------------- GPTQ
def autogptq_pack_rows(intweight, bits):
    """AutoGPTQ QuantLinear.pack: intweight [K, N] uint32 -> qweight [K*bits/32, N], its loop structure kept."""
    intweight = intweight.astype(np.uint32)
    qweight = np.zeros((intweight.shape[0] // 32 * bits, intweight.shape[1]), dtype=np.uint32)
    i = 0
    row = 0
    while row < qweight.shape[0]:
        if bits in [2, 4, 8]:
            for j in range(i, i + (32 // bits)):
                qweight[row] |= intweight[j] << (bits * (j - i))
            i += 32 // bits
            row += 1
        elif bits == 3:
            for j in range(i, i + 10):
                qweight[row] |= intweight[j] << (3 * (j - i))
            i += 10
            qweight[row] |= intweight[i] << 30
            row += 1
            qweight[row] |= (intweight[i] >> 2) & 1
            i += 1
            for j in range(i, i + 10):
                qweight[row] |= intweight[j] << (3 * (j - i) + 1)
            i += 10
            qweight[row] |= intweight[i] << 31
            row += 1
            qweight[row] |= (intweight[i] >> 1) & 0x3
            i += 1
            for j in range(i, i + 10):
                qweight[row] |= intweight[j] << (3 * (j - i) + 2)
            i += 10
            row += 1
    return qweight


def autogptq_pack_cols(zeros, bits):
    """The same loops along columns (AutoGPTQ's qzeros packing)."""
    return autogptq_pack_rows(zeros.T.copy(), bits).T.copy()


def autogptq_dequant(qweight, qzeros, scales, g_idx, bits, v1):
    """AutoGPTQ's torch dequantization (qlinear_cuda_old / exllama fallback), in fp16."""
    qweight = torch.from_numpy(qweight.view(np.int32))
    qzeros = torch.from_numpy(qzeros.view(np.int32))
    scales = torch.from_numpy(scales)
    g = torch.from_numpy(g_idx.astype(np.int64))
    if bits in [2, 4, 8]:
        wf = torch.tensor(list(range(0, 32, bits)), dtype=torch.int32).unsqueeze(0)
        zeros = torch.bitwise_right_shift(torch.unsqueeze(qzeros, 2).expand(-1, -1, 32 // bits), wf.unsqueeze(0))
        zeros = zeros.to(torch.int16 if bits == 8 else torch.int8)
        if v1:
            zeros = zeros + 1
        zeros = torch.bitwise_and(zeros, (2 ** bits) - 1).reshape(scales.shape)
        weight = torch.bitwise_right_shift(torch.unsqueeze(qweight, 1).expand(-1, 32 // bits, -1), wf.unsqueeze(-1))
        weight = torch.bitwise_and(weight.to(torch.int16 if bits == 8 else torch.int8), (2 ** bits) - 1)
        weight = weight.reshape(-1, weight.shape[2])
    else:
        wf = torch.tensor([[0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 0],
                           [0, 1, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31],
                           [0, 2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 0]], dtype=torch.int32).reshape(1, 3, 12)
        zeros = qzeros.reshape(qzeros.shape[0], qzeros.shape[1] // 3, 3, 1).expand(-1, -1, -1, 12)
        zeros = zeros >> wf.unsqueeze(0)
        zeros[:, :, 0, 10] = (zeros[:, :, 0, 10] & 0x3) | ((zeros[:, :, 1, 0] << 2) & 0x4)
        zeros[:, :, 1, 11] = (zeros[:, :, 1, 11] & 0x1) | ((zeros[:, :, 2, 0] << 1) & 0x6)
        zeros = zeros & 0x7
        zeros = torch.cat([zeros[:, :, 0, :11], zeros[:, :, 1, 1:12], zeros[:, :, 2, 1:11]], dim=2)
        if v1:
            zeros = (zeros + 1) & 0x7
        zeros = zeros.reshape(scales.shape)
        weight = qweight.reshape(qweight.shape[0] // 3, 3, 1, qweight.shape[1]).expand(-1, -1, 12, -1)
        weight = (weight >> wf.unsqueeze(-1)) & 0x7
        weight[:, 0, 10] = (weight[:, 0, 10] & 0x3) | ((weight[:, 1, 0] << 2) & 0x4)
        weight[:, 1, 11] = (weight[:, 1, 11] & 0x1) | ((weight[:, 2, 0] << 1) & 0x6)
        weight = weight & 0x7
        weight = torch.cat([weight[:, 0, :11], weight[:, 1, 1:12], weight[:, 2, 1:11]], dim=1)
        weight = weight.reshape(-1, weight.shape[-1])
    return scales[g] * (weight - zeros[g])


def gptq_case(name, rng, bits, K, N, group, sym, act_order, v1):
    assert N % 32 == 0 and K % 32 == 0  # AutoGPTQ sizes qzeros as N // 32 * bits
    w = rng.standard_normal((K, N)).astype(np.float32) * 0.05
    if act_order:
        perm = rng.permutation(K)
        invperm = np.argsort(perm)
        g_idx = (invperm // group).astype(np.int32)
    else:
        g_idx = (np.arange(K) // group).astype(np.int32)
    q, scales, zeros = rtn(w, bits, group, sym, g_idx)
    if v1:
        zeros = np.maximum(zeros, 1)  # v1 cannot store 0 (docs/LAYOUTS.md 6.1)
    qweight = autogptq_pack_rows(q, bits)
    stored = (zeros - 1) if v1 else zeros
    qzeros = autogptq_pack_cols((stored & (2 ** bits - 1)).astype(np.uint32), bits)
    ref = autogptq_dequant(qweight, qzeros, scales, g_idx, bits, v1)
    # The reproduced packer and dequantizer must agree with the logical values they started from.
    direct = torch.from_numpy(scales)[torch.from_numpy(g_idx).long()] * torch.from_numpy(q - zeros[g_idx]).to(torch.int16)
    assert torch.equal(ref, direct), name
    save(name, {
        "qweight": torch.from_numpy(qweight.view(np.int32)),
        "qzeros": torch.from_numpy(qzeros.view(np.int32)),
        "scales": torch.from_numpy(scales),
        "g_idx": torch.from_numpy(g_idx),
        "logical.codes": torch.from_numpy(q.astype(np.uint8)),
        "logical.zeros": torch.from_numpy(zeros.astype(np.int32)),
        "ref.dequant": ref,
    }, {"bits": bits, "group_size": group, "checkpoint_format": "gptq" if v1 else "gptq_v2"})


# ----------------------------------------------------------------------------------------------------------- AWQ
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]


def autoawq_pack(intweight, w_bit=4):
    """WQLinear_GEMM.from_linear: intweight [K, N] -> [K, N/8] int32, slots in AWQ_ORDER."""
    intweight = torch.from_numpy(intweight.astype(np.int32))
    pack_num = 32 // w_bit
    qweight = torch.zeros((intweight.shape[0], intweight.shape[1] // 32 * w_bit), dtype=torch.int32)
    for col in range(intweight.shape[1] // pack_num):
        for i in range(pack_num):
            qweight[:, col] |= intweight[:, col * pack_num + AWQ_ORDER[i]] << (i * w_bit)
    return qweight


def autoawq_dequant(qweight, qzeros, scales, bits, group_size):
    """AutoAWQ utils/packing_utils.dequantize_gemm."""
    shifts = torch.arange(0, 32, bits)
    iweights = torch.bitwise_right_shift(qweight[:, :, None], shifts[None, None, :]).to(torch.int8)
    iweights = iweights.view(iweights.shape[0], -1)
    izeros = torch.bitwise_right_shift(qzeros[:, :, None], shifts[None, None, :]).to(torch.int8)
    izeros = izeros.view(izeros.shape[0], -1)
    order = torch.arange(iweights.shape[-1], dtype=torch.int32).view(-1, 32 // bits)[:, AWQ_REVERSE_ORDER].view(-1)
    izeros = izeros[:, order]
    iweights = iweights[:, order]
    iweights = torch.bitwise_and(iweights, (2 ** bits) - 1)
    izeros = torch.bitwise_and(izeros, (2 ** bits) - 1)
    scales = scales.repeat_interleave(group_size, dim=0)
    izeros = izeros.repeat_interleave(group_size, dim=0)
    return (iweights - izeros) * scales


def awq_case(name, rng, K, N, group):
    w = rng.standard_normal((K, N)).astype(np.float32) * 0.05
    g_idx = np.arange(K) // group
    q, scales, zeros = rtn(w, 4, group, False, g_idx)
    zeros[0, :3] = 0  # the zero point that buggy repacks turn into 15
    qweight = autoawq_pack(q)
    qzeros = autoawq_pack(zeros)
    scales_t = torch.from_numpy(scales)
    ref = autoawq_dequant(qweight, qzeros, scales_t, 4, group)
    direct = torch.from_numpy(q - zeros[g_idx]).to(torch.int8) * scales_t[torch.from_numpy(g_idx).long()]
    assert torch.equal(ref, direct), name
    save(name, {
        "qweight": qweight, "qzeros": qzeros, "scales": scales_t,
        "logical.codes": torch.from_numpy(q.astype(np.uint8)),
        "logical.zeros": torch.from_numpy(zeros.astype(np.int32)),
        "ref.dequant": ref,
    }, {"bits": 4, "group_size": group, "version": "gemm"})


def awq_gemv_zeros_width(K, group):
    """AutoAWQ gemv.py calculate_zeros_width (pack_num 8)."""
    mult = 1 if group >= 128 else {64: 2, 32: 4}[group]
    base = (K // group + 7) // 8
    return (base + mult - 1) // mult * mult


def autoawq_gemv_pack(q, zeros, scales, group):
    """WQLinear_GEMV.from_linear: codes q [K, N], zeros/scales [K/G, N] -> qweight [N, K/8], qzeros [N, W],
    scales [N, 8W]; slot i of word c holds element 8c + i (order_map 0..7), padding zero."""
    K, N = q.shape
    width = awq_gemv_zeros_width(K, group)
    intweight = torch.from_numpy(q.T.astype(np.int32).copy())  # [N, K], as from_linear's intweight
    qweight = torch.zeros((N, K // 32 * 4), dtype=torch.int32)
    for col in range(K // 8):
        for i in range(8):
            qweight[:, col] |= intweight[:, col * 8 + i] << (i * 4)
    z = torch.from_numpy(zeros.T.astype(np.int32).copy())  # [N, K/G]
    qzeros = torch.zeros((N, width), dtype=torch.int32)
    for col in range((z.shape[1] + 7) // 8):
        for i in range(8):
            if col * 8 + i >= z.shape[1]:
                continue
            qzeros[:, col] |= z[:, col * 8 + i] << (i * 4)
    qscales = torch.zeros((N, width * 8), dtype=torch.float16)
    qscales[:, : K // group] = torch.from_numpy(scales.T.copy())
    return qweight, qzeros, qscales


def awq_gemv_case(name, rng, K, N, group):
    w = rng.standard_normal((K, N)).astype(np.float32) * 0.05
    g_idx = np.arange(K) // group
    q, scales, zeros = rtn(w, 4, group, False, g_idx)
    zeros[0, :3] = 0
    qweight, qzeros, qscales = autoawq_gemv_pack(q, zeros, scales, group)
    scales_t = torch.from_numpy(scales)
    ref = torch.from_numpy(q - zeros[g_idx]).to(torch.int8) * scales_t[torch.from_numpy(g_idx).long()]
    gemm_ref = autoawq_dequant(autoawq_pack(q), autoawq_pack(zeros), scales_t, 4, group)
    assert torch.equal(ref, gemm_ref), name
    save(name, {
        "qweight": qweight, "qzeros": qzeros, "scales": qscales,
        "gemm.qweight": autoawq_pack(q), "gemm.qzeros": autoawq_pack(zeros), "gemm.scales": scales_t,
        "logical.codes": torch.from_numpy(q.astype(np.uint8)),
        "logical.zeros": torch.from_numpy(zeros.astype(np.int32)),
        "ref.dequant": ref,
    }, {"bits": 4, "group_size": group, "version": "gemv"})


# -------------------------------------------------------------------------------------------------------- Marlin
def get_weight_perm(num_bits):
    perm_list = []
    for i in range(32):
        perm1 = []
        col = i // 4
        for block in [0, 1]:
            for row in [2 * (i % 4), 2 * (i % 4) + 1, 2 * (i % 4 + 4), 2 * (i % 4 + 4) + 1]:
                perm1.append(16 * row + col + 8 * block)
        for j in range(4):
            perm_list.extend([p + 256 * j for p in perm1])
    perm = np.array(perm_list)
    interleave = np.array([0, 2, 4, 6, 1, 3, 5, 7]) if num_bits == 4 else np.array([0, 2, 1, 3])
    perm = perm.reshape((-1, len(interleave)))[:, interleave].ravel()
    return torch.from_numpy(perm)


def get_scale_perms():
    scale_perm = []
    for i in range(8):
        scale_perm.extend([i + 8 * j for j in range(8)])
    scale_perm_single = []
    for i in range(4):
        scale_perm_single.extend([2 * i + j for j in [0, 1, 8, 9, 16, 17, 24, 25]])
    return scale_perm, scale_perm_single


def marlin_permute_weights(q_w, size_k, size_n, perm, tile=16):
    q_w = q_w.reshape((size_k // tile, tile, size_n // tile, tile))
    q_w = q_w.permute((0, 2, 1, 3))
    q_w = q_w.reshape((size_k // tile, size_n * tile))
    q_w = q_w.reshape((-1, perm.numel()))[:, perm].reshape(q_w.shape)
    return q_w


def marlin_weights(q_w, size_k, size_n, num_bits, perm):
    q_w = marlin_permute_weights(q_w, size_k, size_n, perm)
    pack_factor = 32 // num_bits
    q_w = q_w.cpu().numpy().astype(np.uint32)
    q_packed = np.zeros((q_w.shape[0], q_w.shape[1] // pack_factor), dtype=np.uint32)
    for i in range(pack_factor):
        q_packed |= q_w[:, i::pack_factor] << num_bits * i
    return torch.from_numpy(q_packed.astype(np.int32))


def marlin_permute_scales(s, size_k, size_n, group_size):
    scale_perm, scale_perm_single = get_scale_perms()
    if group_size < size_k and group_size != -1:
        s = s.reshape((-1, len(scale_perm)))[:, scale_perm]
    else:
        s = s.reshape((-1, len(scale_perm_single)))[:, scale_perm_single]
    return s.reshape((-1, size_n)).contiguous()


def marlin_case(name, rng, bits, K, N, group, act_order):
    w = rng.standard_normal((K, N)).astype(np.float32) * 0.05
    if act_order:
        g_idx = (np.argsort(rng.permutation(K)) // group).astype(np.int32)
    else:
        g_idx = (np.arange(K) // group).astype(np.int32)
    q, scales, _ = rtn(w, bits, group, True, g_idx)
    q_t = torch.from_numpy(q.astype(np.int32))
    g_t = torch.from_numpy(g_idx)
    tensors = {"logical.codes": torch.from_numpy(q.astype(np.uint8)), "logical.scales": torch.from_numpy(scales),
               "logical.g_idx": g_t}
    if act_order:
        # vLLM: g_idx_sort_indices = torch.argsort(g_idx); stable here so the order within a group is defined.
        sort_indices = torch.argsort(g_t, stable=True).to(torch.int32)
        q_t = q_t[sort_indices.long()]
        tensors["g_idx"] = g_t[sort_indices.long()]
        tensors["perm"] = sort_indices
    tensors["qweight"] = marlin_weights(q_t, K, N, bits, get_weight_perm(bits))
    tensors["scales"] = marlin_permute_scales(torch.from_numpy(scales), K, N, group if group < K else -1)
    save(name, tensors, {"bits": bits, "group_size": group if group < K else -1, "k": K})


# ---------------------------------------------------------------------------------------------- compressed-tensors
def ct_helpers():
    spec = importlib.util.find_spec("compressed_tensors")
    base = os.path.dirname(spec.origin) if spec and spec.origin else None
    if base is None:
        for p in sys.path:
            cand = os.path.join(p, "compressed_tensors")
            if os.path.isdir(cand):
                base = cand
    if base is None:
        raise ModuleNotFoundError("No module named 'compressed_tensors' (pip install --no-deps compressed-tensors)")
    path = os.path.join(base, "compressors", "pack_quantized", "helpers.py")
    mod_spec = importlib.util.spec_from_file_location("ct_pack_helpers", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return mod


def ct_case(name, rng, helpers, bits, K, N, group, sym, scale_dtype):
    w = rng.standard_normal((K, N)).astype(np.float32) * 0.05
    g_idx = np.arange(K) // group
    q, scales, zeros = rtn(w, bits, group, sym, g_idx)
    offset = 1 << (bits - 1)
    signed = torch.from_numpy((q - offset).T.astype(np.int8).copy())           # [N, K]
    zp_signed = torch.from_numpy((zeros - offset).T.astype(np.int8).copy())    # [N, G]
    scale = torch.from_numpy(scales.astype(np.float32).T.copy()).to(scale_dtype)  # [N, G]
    tensors = {
        "weight_packed": helpers.pack_to_int32(signed, bits),
        "weight_shape": torch.tensor([N, K]),
        "weight_scale": scale,
    }
    if not sym:
        tensors["weight_zero_point"] = helpers.pack_to_int32(zp_signed, bits, packed_dim=0)
    # compressed-tensors _dequantize: x_q.to(scale.dtype) - zp.to(scale.dtype), times scale, per group.
    x_q = signed.to(scale.dtype).unflatten(-1, (K // group, group))
    if not sym:
        x_q = x_q - zp_signed.to(scale.dtype).unsqueeze(-1)
    ref = (x_q * scale.unsqueeze(-1)).flatten(start_dim=-2)
    # unpack_from_int32 must give back the signed values (the library's own reader).
    assert torch.equal(helpers.unpack_from_int32(tensors["weight_packed"], bits, torch.Size([N, K])), signed)
    tensors["logical.codes"] = torch.from_numpy(q.astype(np.uint8))
    tensors["ref.dequant"] = ref  # [N, K], nn.Linear order
    save(name, tensors, {"bits": bits, "group_size": group, "symmetric": int(sym)})


# ---------------------------------------------------------------------------------------------------------- GGUF
def gguf_case(rng):
    import gguf
    from gguf import GGMLQuantizationType as T
    path = os.path.join(OUT, "gguf_small.gguf")
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("epk layout vectors")
    writer.add_uint32("epk.test.count", 7)
    writer.add_array("epk.test.floats", [0.5, -1.25, 3.0])
    refs = {}

    def add_float(name, data, qtype):
        raw = gguf.quants.quantize(data, qtype)
        writer.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qtype)
        refs[name] = torch.from_numpy(gguf.quants.dequantize(raw, qtype).astype(np.float32))

    def add_random_kquant(name, rows, cols, qtype, d_offsets):
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
        for off in d_offsets:  # f16 super-block scales: finite, moderate, either sign for dmin
            d = (rng.standard_normal((rows, cols // block)) * 0.01).astype(np.float16)
            raw[:, :, off:off + 2] = d.view(np.uint8).reshape(rows, cols // block, 2)
        raw = raw.reshape(rows, cols // block * size)
        writer.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qtype)
        refs[name] = torch.from_numpy(gguf.quants.dequantize(raw, qtype).astype(np.float32))

    x = (rng.standard_normal((3, 96)) * 0.1).astype(np.float32)
    x[0, :32] = 0.0  # an all-zero block (d = 0)
    add_float("q4_0", x, T.Q4_0)
    add_float("q4_1", x, T.Q4_1)
    add_float("q8_0", x, T.Q8_0)
    add_float("f16", x[:, :10].copy(), T.F16)
    add_random_kquant("q4_k", 2, 512, T.Q4_K, [0, 2])
    add_random_kquant("q5_k", 2, 512, T.Q5_K, [0, 2])
    add_random_kquant("q6_k", 3, 256, T.Q6_K, [208])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{path}: {os.path.getsize(path)} bytes")
    save("gguf_small_ref", {"ref." + k: v for k, v in refs.items()}, {"source": "gguf.quants.dequantize"})


# --------------------------------------------------------------------------------------------------- bitsandbytes
def bnb_case(name, quant_type, shape, blocksize, double_quant, dtype):
    """bitsandbytes' own quantize_4bit / dequantize_4bit on the CPU.

    bitsandbytes 0.50.2's native CPU dequantize_4bit kernel disagrees with its own quantizer for some shapes whose
    last dimension is not a multiple of blocksize (seen: (16, 64) with blocksize 128, (16, 96) with 64; blocks then
    cross rows). Every shape here has a last dimension that is a multiple of blocksize (native kernel) or odd (the
    Python fallback _dequantize_4bit_compute, which blocks over the flat index like the quantizer and CUDA).
    """
    import copy

    import bitsandbytes.functional as F
    torch.manual_seed(zlib.crc32(name.encode()))
    w = (torch.randn(shape) * 0.05).to(dtype)
    q, state = F.quantize_4bit(w, blocksize=blocksize, quant_type=quant_type, compress_statistics=double_quant)
    ref = F.dequantize_4bit(q, state)
    state32 = copy.deepcopy(state)
    state32.dtype = torch.float32
    ref32 = F.dequantize_4bit(q, state32)  # the float32 products before the final rounding to dtype
    assert torch.equal(ref32.to(dtype), ref), name
    tensors = {"weight": q}
    for k, v in state.as_dict(packed=True).items():
        tensors["weight." + k] = v
    tensors["ref.dequant"] = ref
    tensors["ref.dequant_f32"] = ref32
    save(name, tensors, {"quant_type": quant_type, "blocksize": blocksize, "double_quant": int(double_quant)})


def main():
    global OUT
    if len(sys.argv) == 3 and sys.argv[1] == "--out":
        OUT = sys.argv[2]
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20261130)
    gptq_case("gptq_4bit_v1_actorder", rng, 4, 256, 64, 32, True, True, True)
    gptq_case("gptq_4bit_v1_asym", rng, 4, 128, 96, 64, False, False, True)
    gptq_case("gptq_3bit_v1_asym", rng, 3, 192, 64, 32, False, True, True)
    gptq_case("gptq_2bit_v2_asym", rng, 2, 128, 64, 32, False, False, False)
    gptq_case("gptq_8bit_v2_asym", rng, 8, 96, 32, 32, False, True, False)
    gptq_case("gptq_8bit_v1_sym", rng, 8, 64, 32, 64, True, False, True)
    awq_case("awq_4bit_g64", rng, 256, 96, 64)  # AutoAWQ sizes qweight as N // 32 * 4
    marlin_case("marlin_4bit_g64", rng, 4, 256, 128, 64, False)
    marlin_case("marlin_4bit_g32_actorder", rng, 4, 256, 64, 32, True)
    marlin_case("marlin_4bit_channel", rng, 4, 128, 64, 128, False)
    marlin_case("marlin_8bit_g64", rng, 8, 128, 64, 64, False)
    helpers = ct_helpers()
    ct_case("ct_4bit_sym_g32_bf16", rng, helpers, 4, 128, 40, 32, True, torch.bfloat16)
    ct_case("ct_4bit_asym_g64_f16", rng, helpers, 4, 128, 40, 64, False, torch.float16)
    ct_case("ct_3bit_asym_g32_bf16", rng, helpers, 3, 96, 37, 32, False, torch.bfloat16)
    ct_case("ct_8bit_asym_channel_bf16", rng, helpers, 8, 72, 24, 72, False, torch.bfloat16)
    gguf_case(rng)
    bnb_case("bnb_nf4_dq_bf16", "nf4", (33, 71), 64, True, torch.bfloat16)  # odd numel, blocks cross rows
    bnb_case("bnb_nf4_f16", "nf4", (8, 256), 128, False, torch.float16)
    bnb_case("bnb_fp4_dq_f32", "fp4", (24, 64), 64, True, torch.float32)
    bnb_case("bnb_fp4_bf16", "fp4", (9, 64), 32, False, torch.bfloat16)
    bnb_case("bnb_fp4_odd_bf16", "fp4", (5, 37), 64, False, torch.bfloat16)  # Python fallback path
    # Added later with a generator of their own, so the files above keep their bytes.
    rng_gemv = np.random.default_rng(20261201)
    awq_gemv_case("awq_gemv_4bit_g128", rng_gemv, 256, 32, 128)  # 2 groups: qzeros width 1, scales padded to 8
    awq_gemv_case("awq_gemv_4bit_g64", rng_gemv, 192, 32, 64)    # width rounded up to 2
    awq_gemv_case("awq_gemv_4bit_g32", rng_gemv, 128, 32, 32)    # width rounded up to 4 (GEMM: N % 32 == 0)


if __name__ == "__main__":
    main()
