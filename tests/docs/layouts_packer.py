#!/usr/bin/env python3
"""The packed integer layouts written from docs/LAYOUTS.md section 4 alone (pure Python, no numpy), held to the
committed layout vectors in tests/data/layouts, which scripts/testdata/make_layout_vectors.py made with the upstream
packers (AutoGPTQ, AutoAWQ, vLLM's Marlin helpers): if the document and those packers part ways, this fails.

Each vector holds the logical inputs (logical.codes [K, N], and as the case has them logical.zeros, logical.scales,
logical.g_idx) and the packer's tensors under their checkpoint names; every tensor this script can derive from the
document and those inputs is compared byte for byte.

usage: layouts_packer.py VECTOR.safetensors...   (exit 0 when every derived tensor matches)
"""
import json
import struct
import sys

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # section 4.5


def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack_from("<Q", data, 0)[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[base + b:base + e])
    return json.loads(meta.get("params", "{}")), out


def ints(tensor):
    dtype, shape, raw = tensor
    fmt = {"U8": "B", "I32": "i", "I64": "q"}[dtype]
    size = {"U8": 1, "I32": 4, "I64": 8}[dtype]
    return shape, list(struct.unpack("<%d%s" % (len(raw) // size, fmt), raw))


def pack_stream(codes, bits):
    """Section 4.3: one LSB-first stream of u32 words, code i in bits [i b, i b + b)."""
    words = [0] * ((len(codes) * bits + 31) // 32)
    for i, c in enumerate(codes):
        bit = i * bits
        words[bit // 32] |= (c << (bit % 32)) & 0xFFFFFFFF
        if bit % 32 + bits > 32:  # straddles into the next word
            words[bit // 32 + 1] |= c >> (32 - bit % 32)
    return words


def as_i32_bytes(words):
    return struct.pack("<%di" % len(words), *[w - (1 << 32) if w >= 1 << 31 else w for w in words])


def gptq(params, t):
    """Section 4.4."""
    bits = params["bits"]
    (k, n), codes = ints(t["logical.codes"])
    (g, _), zeros = ints(t["logical.zeros"])
    v1 = params.get("checkpoint_format", "gptq") == "gptq"
    out = {}
    qweight = [0] * (k * bits // 32 * n)
    for col in range(n):  # packed along K: one stream per column, word w at qweight[w][col]
        stream = pack_stream([codes[r * n + col] for r in range(k)], bits)
        for w, word in enumerate(stream):
            qweight[w * n + col] = word
    out["qweight"] = as_i32_bytes(qweight)
    mask = (1 << bits) - 1
    qzeros = []
    for r in range(g):  # each group's zeros packed along N; v1 stores (z - 1) & mask
        row = [((z - 1) & mask) if v1 else z for z in zeros[r * n:(r + 1) * n]]
        qzeros += pack_stream(row, bits)
    out["qzeros"] = as_i32_bytes(qzeros)
    return out  # scales and g_idx are the source's own (the vectors hold no logical form of them to derive from)


def awq(params, t):
    """Section 4.5."""
    (k, n), codes = ints(t["logical.codes"])
    (g, _), zeros = ints(t["logical.zeros"])

    def pack_row(row):
        words = []
        for c in range(n // 8):
            w = 0
            for i in range(8):
                w |= row[8 * c + AWQ_ORDER[i]] << (4 * i)
            words.append(w)
        return words

    qweight, qzeros = [], []
    for r in range(k):
        qweight += pack_row(codes[r * n:(r + 1) * n])
    for r in range(g):
        qzeros += pack_row(zeros[r * n:(r + 1) * n])
    return {"qweight": as_i32_bytes(qweight), "qzeros": as_i32_bytes(qzeros)}  # scales: the source's own


def marlin_weight_perm(bits):
    """Section 4.6, step (2)."""
    perm = []
    for i in range(32):
        col = i // 4
        eight = [16 * row + col + 8 * block for block in (0, 1)
                 for row in (2 * (i % 4), 2 * (i % 4) + 1, 2 * (i % 4 + 4), 2 * (i % 4 + 4) + 1)]
        for j in range(4):
            perm += [e + 256 * j for e in eight]
    order = [0, 2, 4, 6, 1, 3, 5, 7] if bits == 4 else [0, 2, 1, 3]
    run = len(order)
    return [perm[base + order[k]] for base in range(0, len(perm), run) for k in range(run)]


def marlin(params, t):
    """Section 4.6."""
    bits = params["bits"]
    (k, n), codes = ints(t["logical.codes"])
    g_idx = ints(t["logical.g_idx"])[1] if "logical.g_idx" in t else None
    group = params["group_size"] if params["group_size"] > 0 else k
    out = {}
    rows = list(range(k))
    if g_idx is not None and any(g_idx[r] != r // group for r in range(k)):  # act-order: rows sorted by group
        rows = sorted(range(k), key=lambda r: (g_idx[r], r))
        out["g_idx"] = struct.pack("<%di" % k, *[g_idx[r] for r in rows])
        out["perm"] = struct.pack("<%di" % k, *rows)
    tiled = [0] * (k * n)
    for j, src in enumerate(rows):  # step (1): 16x16 tiles, tile row after tile row
        for c in range(n):
            r, i, tt, jj = j // 16, j % 16, c // 16, c % 16
            tiled[r * 16 * n + tt * 256 + i * 16 + jj] = codes[src * n + c]
    perm = marlin_weight_perm(bits)
    permuted = [tiled[base + perm[p]] for base in range(0, len(tiled), 1024) for p in range(1024)]
    out["qweight"] = as_i32_bytes(pack_stream(permuted, bits))  # step (3)
    raw = t["logical.scales"][2]
    vals = [raw[2 * i:2 * i + 2] for i in range(len(raw) // 2)]  # 2-byte scales, permuted as they are
    if group < k:
        p = [i + 8 * j for i in range(8) for j in range(8)]
    else:
        p = [2 * i + d for i in range(4) for d in (0, 1, 8, 9, 16, 17, 24, 25)]
    out["scales"] = b"".join(vals[base + p[x]] for base in range(0, len(vals), len(p)) for x in range(len(p)))
    return out


def main(paths):
    failures = 0
    for path in paths:
        name = path.rsplit("/", 1)[-1]
        params, t = read_safetensors(path)
        if name.startswith("gptq_"):
            derived = gptq(params, t)
        elif name.startswith("awq_") and params.get("version") == "gemm":
            derived = awq(params, t)
        elif name.startswith("marlin_"):
            derived = marlin(params, t)
        else:
            continue
        for tensor, got in sorted(derived.items()):
            if tensor not in t:
                print("FAIL %s: the vector has no %s" % (name, tensor))
                failures += 1
            elif got != t[tensor][2]:
                want = t[tensor][2]
                diff = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
                print("FAIL %s %s: first differing byte %d" % (name, tensor, diff))
                failures += 1
        print("%s: %s checked" % (name, ", ".join(sorted(derived))))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
