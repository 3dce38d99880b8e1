"""Test data for the epk package's tests: a small Llama-shaped checkpoint written with NumPy (safetensors, BF16),
and a reader for the safetensors files `epk decompress` writes. Deterministic for a given seed."""

import json
import struct

import numpy as np

# Odd sizes on purpose: rows and columns that are not multiples of 8, 16 or 64 (E8 groups, tiles, alignment).
HIDDEN = 72
INTERMEDIATE = 200
VOCAB = 97
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS

_DT = {"BF16": (2, np.uint16), "F16": (2, np.float16), "F32": (4, np.float32), "I8": (1, np.int8),
       "U8": (1, np.uint8), "F8_E4M3": (1, np.uint8), "I32": (4, np.int32), "I64": (8, np.int64)}


def bf16_bits(x):
    """float32 -> bf16 bit patterns (round to nearest even), as uint16."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = ((u >> 16) & 1) + 0x7FFF
    return ((u + r) >> 16).astype(np.uint16)


def llama_tensors(seed=1, layers=LAYERS):
    """{name: (dtype, shape, float32 values)} of a Llama-shaped model (transformers' LlamaForCausalLM names)."""
    rng = np.random.default_rng(seed)
    t = {}

    def lin(name, out_f, in_f):
        t[name] = rng.standard_normal((out_f, in_f)).astype(np.float32) * (1.0 / np.sqrt(in_f))

    t["model.embed_tokens.weight"] = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32) * 0.02
    for i in range(layers):
        p = f"model.layers.{i}."
        lin(p + "self_attn.q_proj.weight", HEADS * HEAD_DIM, HIDDEN)
        lin(p + "self_attn.k_proj.weight", KV_HEADS * HEAD_DIM, HIDDEN)
        lin(p + "self_attn.v_proj.weight", KV_HEADS * HEAD_DIM, HIDDEN)
        lin(p + "self_attn.o_proj.weight", HIDDEN, HEADS * HEAD_DIM)
        lin(p + "mlp.gate_proj.weight", INTERMEDIATE, HIDDEN)
        lin(p + "mlp.up_proj.weight", INTERMEDIATE, HIDDEN)
        lin(p + "mlp.down_proj.weight", HIDDEN, INTERMEDIATE)
        t[p + "input_layernorm.weight"] = 1.0 + 0.1 * rng.standard_normal(HIDDEN).astype(np.float32)
        t[p + "post_attention_layernorm.weight"] = 1.0 + 0.1 * rng.standard_normal(HIDDEN).astype(np.float32)
    t["model.norm.weight"] = 1.0 + 0.1 * rng.standard_normal(HIDDEN).astype(np.float32)
    lin("lm_head.weight", VOCAB, HIDDEN)
    return t


def write_safetensors(path, tensors):
    """tensors: {name: (dtype name, numpy array of that dtype's storage)}."""
    header, offset, blobs = {}, 0, []
    for name, (dtype, arr) in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_llama_bf16(path, seed=1, layers=LAYERS):
    write_safetensors(path, {n: ("BF16", bf16_bits(v)) for n, v in llama_tensors(seed, layers).items()})


def read_safetensors(path):
    """{name: (dtype name, shape, raw bytes)}."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        out[name] = (e["dtype"], tuple(e["shape"]), data[base + a:base + b])
    return out


def as_array(entry):
    """A safetensors entry as a NumPy array of its storage type (bf16 and fp8 as unsigned integers)."""
    dtype, shape, raw = entry
    return np.frombuffer(raw, dtype=_DT[dtype][1]).reshape(shape)
