#!/usr/bin/env python3
"""Writes tests/data/safetensors/: files made by the real `safetensors` package, and expected.json with each tensor's
dtype, shape and the sha256 of its bytes as the package itself reads them back (safetensors.deserialize).

Run: /opt/refvenv/bin/python scripts/testdata/make_safetensors_vectors.py  (needs torch, numpy, safetensors>=0.6)
Deterministic: fixed seed; re-running rewrites identical files.
"""
import hashlib
import json
import os
import struct
import sys

import numpy as np
import safetensors
import torch
from safetensors import deserialize
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OUT = os.path.normpath(os.path.join(ROOT, "tests", "data", "safetensors"))


def raw(t, dtype):
    return torch.from_numpy(np.ascontiguousarray(t)).view(dtype) if dtype is not None else torch.from_numpy(t)


def all_dtypes(rng):
    """Every dtype torch + safetensors can write, odd shapes, edge values, a 0-dim scalar and empty tensors."""
    t = {}
    t["bool.mask"] = torch.from_numpy(rng.integers(0, 2, size=(3, 5)).astype(np.bool_))
    t["u8.bytes"] = torch.from_numpy(np.array([0, 1, 127, 128, 255, 7, 42], dtype=np.uint8))
    t["i8.codes"] = torch.from_numpy(np.array([[-128, -1, 0], [1, 127, 5]], dtype=np.int8))
    t["i16.v"] = torch.from_numpy(np.array([-32768, -1, 0, 1, 32767], dtype=np.int16))
    t["u16.v"] = torch.from_numpy(rng.integers(0, 65536, size=(3, 3)).astype(np.uint16))
    t["i32.g_idx"] = torch.from_numpy(rng.integers(-2**31, 2**31, size=(4, 1, 3)).astype(np.int32))
    t["u32.v"] = torch.from_numpy(np.array([0, 1, 2**31, 2**32 - 1, 12345], dtype=np.uint32))
    t["i64.v"] = torch.from_numpy(np.array([-2**63, 0, 2**63 - 1], dtype=np.int64))
    t["u64.v"] = torch.from_numpy(np.array([[0, 1], [2**63, 2**64 - 1]], dtype=np.uint64))
    t["f16.w"] = torch.from_numpy(rng.standard_normal((3, 7)).astype(np.float16))
    t["model.layers.0.self_attn.q_proj.weight"] = torch.from_numpy(rng.standard_normal((5, 3)).astype(np.float32)).to(
        torch.bfloat16)
    t["f32.w"] = torch.from_numpy(rng.standard_normal(17).astype(np.float32))
    t["f64.w"] = torch.from_numpy(rng.standard_normal((2, 3)))
    t["f8_e4m3.w"] = torch.from_numpy(rng.integers(0, 256, size=9).astype(np.uint8)).view(torch.float8_e4m3fn)
    t["f8_e5m2.w"] = torch.from_numpy(rng.integers(0, 256, size=(2, 5)).astype(np.uint8)).view(torch.float8_e5m2)
    t["f8_e8m0.scales"] = torch.from_numpy(rng.integers(0, 256, size=6).astype(np.uint8)).view(torch.float8_e8m0fnu)
    # float4_e2m1fn_x2 [3, 2] (two values per byte) is written as F4 with the logical shape [3, 4].
    t["f4.w"] = torch.from_numpy(rng.integers(0, 256, size=(3, 2)).astype(np.uint8)).view(torch.float4_e2m1fn_x2)
    t["scalar"] = torch.tensor(3.25, dtype=torch.float32)
    t["empty"] = torch.zeros((0, 3), dtype=torch.float32)
    t["empty.bf16"] = torch.zeros((4, 0), dtype=torch.bfloat16)
    t["na\u00efve.\u00fcnicode"] = torch.from_numpy(np.array([1, 2, 3], dtype=np.int16))
    return t


def header_of(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def describe(path):
    """What the reference reads back: dtype, shape, sha256 of the bytes; file order by offsets."""
    with open(path, "rb") as f:
        data = f.read()
    tensors = {}
    for name, v in deserialize(data):
        tensors[name] = {"dtype": v["dtype"], "shape": list(v["shape"]), "nbytes": len(v["data"]),
                         "sha256": hashlib.sha256(bytes(v["data"])).hexdigest()}
    header = header_of(path)
    meta = header.pop("__metadata__", None) or {}
    order = sorted(header, key=lambda k: (header[k]["data_offsets"][0], header[k]["data_offsets"][1], k))
    return {"metadata": meta, "order": order, "tensors": tensors}


def write_f6(path):
    """F6 cannot be written through the package (no framework dtype), so the file is composed here in the
    reference layout and then checked by the package's own parser (deserialize)."""
    tensors = [  # reference order: dtype rank descending (F6_E3M2 > F6_E2M3), then name
        ("f6.e3m2", "F6_E3M2", [2, 4], bytes(range(10, 16))),
        ("f6.e2m3", "F6_E2M3", [4], bytes([0xA5, 0x5A, 0xFF])),
    ]
    entries, off = [], 0
    for name, dt, shape, b in tensors:
        entries.append('"%s":{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}' % (
            name, dt, ",".join(map(str, shape)), off, off + len(b)))
        off += len(b)
    header = ("{" + ",".join(entries) + "}").encode()
    header += b" " * ((8 - len(header) % 8) % 8)
    blob = struct.pack("<Q", len(header)) + header + b"".join(b for *_, b in tensors)
    got = {n: (v["dtype"], list(v["shape"]), bytes(v["data"])) for n, v in deserialize(blob)}
    assert got == {n: (dt, s, b) for n, dt, s, b in tensors}, got
    with open(path, "wb") as f:
        f.write(blob)


def sharded(rng, outdir):
    os.makedirs(outdir, exist_ok=True)
    shards = [
        {"model.embed_tokens.weight": torch.from_numpy(rng.standard_normal((6, 4)).astype(np.float32)).to(torch.bfloat16),
         "model.layers.0.mlp.up_proj.weight": torch.from_numpy(rng.standard_normal((5, 4)).astype(np.float16))},
        {"model.layers.0.mlp.down_proj.weight": torch.from_numpy(rng.standard_normal((4, 5)).astype(np.float16)),
         "model.layers.0.input_layernorm.weight": torch.from_numpy(rng.standard_normal(4).astype(np.float32)),
         "model.layers.1.mlp.g_idx": torch.from_numpy(rng.integers(0, 3, size=7).astype(np.int32))},
        {"lm_head.weight": torch.from_numpy(rng.standard_normal((6, 4)).astype(np.float32)).to(torch.bfloat16),
         "model.norm.weight": torch.from_numpy(rng.standard_normal(4).astype(np.float32))},
    ]
    weight_map, total = {}, 0
    for i, s in enumerate(shards):
        name = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        save_file(s, os.path.join(outdir, name), metadata={"format": "pt"})
        for k, v in s.items():
            weight_map[k] = name
            total += v.numel() * v.element_size()
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=False) + "\n")
    return [("model-%05d-of-%05d.safetensors" % (i + 1, len(shards))) for i in range(len(shards))]


def main():
    rng = np.random.default_rng(20261130)
    os.makedirs(OUT, exist_ok=True)
    expected = {"generator": "safetensors %s, torch %s" % (safetensors.__version__, torch.__version__), "files": {}}

    save_file(all_dtypes(rng), os.path.join(OUT, "all_dtypes.safetensors"), metadata={"format": "pt"})
    expected["files"]["all_dtypes.safetensors"] = describe(os.path.join(OUT, "all_dtypes.safetensors"))

    save_file({}, os.path.join(OUT, "no_tensors.safetensors"))
    expected["files"]["no_tensors.safetensors"] = describe(os.path.join(OUT, "no_tensors.safetensors"))

    write_f6(os.path.join(OUT, "f6.safetensors"))
    expected["files"]["f6.safetensors"] = describe(os.path.join(OUT, "f6.safetensors"))

    shard_names = sharded(rng, os.path.join(OUT, "sharded"))
    order = []
    for name in shard_names:  # shards in name order, each in file order: the Checkpoint's documented order
        d = describe(os.path.join(OUT, "sharded", name))
        expected["files"]["sharded/" + name] = d
        order += d["order"]
    with open(os.path.join(OUT, "sharded", "model.safetensors.index.json")) as f:
        index = json.load(f)
    expected["checkpoint"] = {"path": "sharded", "order": order,
                              "metadata": {k: str(v) for k, v in index["metadata"].items()}}

    with open(os.path.join(OUT, "expected.json"), "w") as f:
        f.write(json.dumps(expected, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print("wrote", OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
