#!/usr/bin/env python3
"""A second lattice-rans decoder, written from docs/STREAM.md alone (pure Python, no numpy), held to the reference
package's own decoded outputs in tests/data/entropack: if the document and the format part ways, this fails.

Each vector file holds `entropack_quant_state` (the reference blob, STREAM.md section 8) and `decoded.<dtype>`, the
reference decoder's output in that dtype. Every rule used below names its section of docs/STREAM.md.

usage: stream_decoder.py VECTOR.safetensors...   (exit 0 when every output matches bit for bit)
"""
import json
import math
import struct
import sys

LANES = 32
STATE_LOW = 1 << 15


class Corrupt(Exception):
    pass


def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack_from("<Q", data, 0)[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[base + b:base + e])
    return out


def parse_blob(blob):
    """Section 8: u64 length, JSON, seven buffers each at a multiple of 16."""
    n = struct.unpack_from("<Q", blob, 0)[0]
    head = json.loads(blob[8:8 + n])
    assert head["compress_method"] == "lattice_rans"
    offset = (8 + n + 15) // 16 * 16
    item = {"uint16": 2, "uint32": 4, "int32": 4, "float32": 4, "int64": 8}
    fmt = {"uint16": "H", "uint32": "I", "int32": "i", "float32": "f", "int64": "q"}
    bufs = {}
    for name, dt, shape in zip(head["buffer_names"], head["buffer_dtypes"], head["buffer_shapes"]):
        count = math.prod(shape)
        size = count * item[dt]
        bufs[name] = list(struct.unpack_from("<%d%s" % (count, fmt[dt]), blob, offset))
        offset = (offset + size + 15) // 16 * 16
    assert offset == len(blob), "blob ends at the last buffer rounded up to 16"
    rows, cols = head["shape"]
    padded_cols, prob_bits, tile_symbols = bufs["layout"]
    return rows, cols, padded_cols, prob_bits, tile_symbols, bufs


def validate(rows, cols, padded_cols, prob_bits, tile_symbols, b):
    """Section 7, the rules a decoder relies on."""
    vectors = rows * (padded_cols // 8)
    assert rows >= 1 and cols >= 1 and padded_cols % 8 == 0 and cols <= padded_cols < cols + 8
    assert 9 <= prob_bits <= 15 and tile_symbols >= 1
    v = max(32, tile_symbols // 9)
    tiles = (vectors + v - 1) // v
    assert len(b["offsets"]) == tiles + 1 and len(b["states"]) == 32 * tiles
    assert b["offsets"][0] == 0 and b["offsets"][-1] == len(b["payload"])
    assert all(b["offsets"][t] <= b["offsets"][t + 1] for t in range(tiles))
    meta = [b["stream_meta"][4 * t:4 * t + 4] for t in range(17)]
    running = 0
    for n_symbols, sym_min, freq_offset, alphabet in meta:
        assert min(n_symbols, alphabet, freq_offset) >= 0 and freq_offset == running
        assert (n_symbols == 0) == (alphabet == 0) and alphabet <= 1 << prob_bits
        if alphabet:
            assert -(1 << 28) <= sym_min and sym_min + alphabet - 1 <= 1 << 28
            assert sum(b["freq_tables"][freq_offset:freq_offset + alphabet]) == 1 << prob_bits
        running += alphabet
    assert running == len(b["freq_tables"])
    assert meta[0][0] == vectors and meta[0][1] == 0 and meta[0][3] <= 2
    assert meta[1][0] + meta[2][0] == vectors
    assert all(meta[1 + 2 * f][0] == meta[1][0] and meta[2 + 2 * f][0] == meta[2][0] for f in range(8))
    assert len(b["scales"]) == rows and all(math.isfinite(s) and s > 0 for s in b["scales"])
    return vectors, v, tiles, meta


def slot_tables(meta, freqs, prob_bits):
    """Section 3 and 5.1: per table, slot -> (value, freq, cum); None where the table is empty."""
    tables = []
    for _, sym_min, freq_offset, alphabet in meta:
        if alphabet == 0:
            tables.append(None)
            continue
        slots = []
        cum = 0
        for s in range(alphabet):
            f = freqs[freq_offset + s]
            slots.extend([(sym_min + s, f, cum)] * f)
            cum += f
        assert len(slots) == 1 << prob_bits
        tables.append(slots)
    return tables


def decode_tile(t, vectors, v, prob_bits, b, tables):
    """Sections 4 and 5: one tile's cosets and fields, tile-local vector order."""
    first = t * v
    count = min(v, vectors - first)
    words = b["payload"][b["offsets"][t]:b["offsets"][t + 1]]
    ptr = len(words)
    x = b["states"][32 * t:32 * t + 32]
    if any(not STATE_LOW <= s < 1 << 31 for s in x):
        raise Corrupt("bad initial state")
    mask = (1 << prob_bits) - 1
    coset = [0] * count
    fields = [[0] * 8 for _ in range(count)]

    def step(lane, table):
        nonlocal ptr
        if table is None:
            raise Corrupt("empty table")
        s = x[lane]
        slot = s & mask
        value, f, cum = table[slot]
        s = f * (s >> prob_bits) + slot - cum
        if s < STATE_LOW:
            if ptr == 0:
                raise Corrupt("truncated")
            ptr -= 1
            s = (s << 16) | words[ptr]
        x[lane] = s
        return value

    groups = list(range(0, count, LANES))
    for base in reversed(groups):  # the last group first
        n = min(LANES, count - base)
        for lane in range(n - 1, -1, -1):
            coset[base + lane] = step(lane, tables[0])
        for field in range(8):
            for lane in range(n - 1, -1, -1):
                vec = base + lane
                fields[vec][field] = step(lane, tables[1 + 2 * field + coset[vec]])
    if ptr != 0:
        raise Corrupt("unread words")
    if any(s != STATE_LOW for s in x):
        raise Corrupt("bad final state")
    return coset, fields


def f32(value):
    return struct.unpack("<f", struct.pack("<f", value))[0]


def f32_bits(value):
    return struct.unpack("<I", struct.pack("<f", value))[0]


def narrow_table(exp_bits, man_bits, finite_all_ones):
    """Every finite value of a small float format with its code (section 6: RNE to the nearest)."""
    bias = (1 << (exp_bits - 1)) - 1
    out = []
    for code in range(1 << (1 + exp_bits + man_bits)):
        sign = code >> (exp_bits + man_bits)
        e = (code >> man_bits) & ((1 << exp_bits) - 1)
        m = code & ((1 << man_bits) - 1)
        if e == (1 << exp_bits) - 1 and not (finite_all_ones and m != (1 << man_bits) - 1):
            continue  # infinities and NaNs (e4m3fn: only exponent and mantissa all ones is NaN)
        mag = (m / (1 << man_bits)) * 2.0 ** (1 - bias) if e == 0 else (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
        out.append((-mag if sign else mag, code))
    return out


E4M3 = narrow_table(4, 3, True)
E5M2 = narrow_table(5, 2, False)


def to_narrow(value, table, limit):
    """The nearest code to the clamped value, ties to the even code; the sign is kept (a tiny negative value is -0)."""
    value = min(max(value, -limit), limit)
    positive = [vc for vc in table if vc[1] & 0x80 == 0]  # both formats are 8 bits, the sign on top
    _, code = min(positive, key=lambda vc: (abs(vc[0] - abs(value)), vc[1] & 1))
    return code | (0x80 if math.copysign(1.0, value) < 0 else 0)


def to_bf16(value):
    value = min(max(value, -3.38953139e38), 3.38953139e38)
    bits = f32_bits(value)
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


def encode(dtype, value):
    """Section 6: one output element from the float32 value."""
    if dtype == "F32":
        return struct.pack("<f", value)
    if dtype == "BF16":
        return struct.pack("<H", to_bf16(value))
    if dtype == "F16":
        return struct.pack("<e", min(max(value, -65504.0), 65504.0))
    if dtype == "F8_E4M3":
        return bytes([to_narrow(value, E4M3, 448.0)])
    if dtype == "F8_E5M2":
        return bytes([to_narrow(value, E5M2, 57344.0)])
    if dtype == "I8":
        return struct.pack("<b", int(min(max(round(value), -128), 127)))  # round(): half to even
    raise ValueError(dtype)


def decode_values(blob):
    """Sections 2, 4 and 6: the float32 weights, row-major, logical columns."""
    return decode_parts(*parse_blob(blob))


def decode_parts(rows, cols, padded_cols, prob_bits, tile_symbols, b):
    """decode_values on section 1's arrays (b: payload, offsets, states, stream_meta, freq_tables, scales)."""
    vectors, v, tiles, meta = validate(rows, cols, padded_cols, prob_bits, tile_symbols, b)
    tables = slot_tables(meta, b["freq_tables"], prob_bits)
    vpr = padded_cols // 8
    out = [0.0] * (rows * cols)
    for t in range(tiles):
        coset, fields = decode_tile(t, vectors, v, prob_bits, b, tables)
        for i, c in enumerate(coset):
            vec = t * v + i
            row, col = divmod(vec, vpr)
            f = fields[i]
            par = (f[0] ^ f[1] ^ f[2] ^ f[3] ^ f[4] ^ f[5] ^ f[6]) & 1
            z = f[:7] + [2 * f[7] + par]
            scale = b["scales"][row]
            for k in range(8):
                if 8 * col + k < cols:
                    out[row * cols + 8 * col + k] = f32((z[k] + 0.5 * c) * scale)
    return rows, cols, out


def main(paths):
    failures = 0
    for path in paths:
        vec = read_safetensors(path)
        rows, cols, values = decode_values(vec["entropack_quant_state"][2])
        checked = 0
        for name, (dtype, shape, want) in vec.items():
            if not name.startswith("decoded."):
                continue
            got = b"".join(encode(dtype, v) for v in values)
            if shape != [rows, cols] or got != want:
                diff = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), None)
                print("FAIL %s %s: first differing byte %s" % (path, name, diff))
                failures += 1
            checked += 1
        print("%s: %dx%d, %d outputs checked" % (path.rsplit("/", 1)[-1], rows, cols, checked))
        if checked == 0:
            print("FAIL %s: no decoded.* tensors" % path)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
