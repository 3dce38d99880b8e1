#!/usr/bin/env python3
"""The native profile (docs/STREAM.md section 9) read from the documents alone: the .epk index (docs/FORMAT.md
sections 3 and 5, 10.7), the packed buffers expanded into section 1's arrays, then decoded by stream_decoder.py
(written from sections 1-7). The weights must equal `epk decompress --dtype fp32` of the same file bit for bit.

usage: native_profile.py EPK_TOOL MAKE_DEMO_MODEL WORKDIR   (exit 0 when every native tensor matches)
"""
import json
import math
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stream_decoder  # noqa: E402


def read_epk_index(path):
    """FORMAT.md 3 and 5: each tensor's name, shape, encoding, params and buffers (absolute offset, size)."""
    data = open(path, "rb").read()
    assert data[:8] == b"EPK\x00\r\n\x1a\n"
    index_offset = struct.unpack_from("<Q", data, 24)[0]
    at = index_offset

    def u(fmt):
        nonlocal at
        v = struct.unpack_from("<" + fmt, data, at)
        at += struct.calcsize("<" + fmt)
        return v[0]

    def str32():
        nonlocal at
        n = u("I")
        s = data[at:at + n].decode()
        at += n
        return s

    tensors = []
    for _ in range(u("Q")):
        name = str32()
        rank, _dtype, encoding, _reserved = u("B"), u("B"), u("B"), u("B")
        shape = [u("Q") for _ in range(rank)]
        params = json.loads(str32())
        section, _size, count = u("Q"), u("Q"), u("I")
        buffers = {}
        for _ in range(count):
            bname, offset, size, _checksum = str32(), u("Q"), u("Q"), u("Q")
            buffers[bname] = data[section + offset:section + offset + size]
        tensors.append((name, shape, encoding, params, buffers))
    return tensors


class Bits:
    """Section 9: bits fill each byte from its least significant bit; a field is written low bit first."""

    def __init__(self, data):
        self.data, self.pos = data, 0

    def bit(self):
        b = (self.data[self.pos // 8] >> (self.pos % 8)) & 1
        self.pos += 1
        return b

    def field(self, n):
        return sum(self.bit() << i for i in range(n))

    def gamma(self):
        k = 0
        while self.bit() == 0:
            k += 1
        n = 1
        for _ in range(k):
            n = n << 1 | self.bit()
        return n

    def done(self):
        """Only the last byte's zero padding is left."""
        return len(self.data) == (self.pos + 7) // 8 and (self.pos % 8 == 0 or self.data[-1] >> (self.pos % 8) == 0)


def expand(params, bufs):
    """Section 9: the packed buffers as section 1's arrays."""
    rows, padded_cols, tile_symbols = params["rows"], params["padded_cols"], params["tile_symbols"]
    vectors = rows * (padded_cols // 8)
    v = max(32, tile_symbols // 9)
    tiles = max(1, math.ceil(vectors / v))
    assert params["tiles"] == tiles
    payload = list(struct.unpack("<%dH" % (len(bufs["payload"]) // 2), bufs["payload"]))
    bits = Bits(bufs["word_counts"])
    offsets = [0]
    for _ in range(tiles):
        offsets.append(offsets[-1] + bits.field(params["count_bits"]))
    assert bits.done() and offsets[-1] == len(payload)
    bits = Bits(bufs["packed_states"])
    states = []
    for _ in range(tiles * 32):
        length = bits.field(4)
        states.append(1 << (length + 15) | bits.field(length + 15))
    assert bits.done()
    bits = Bits(bufs["packed_tables"])
    meta, freqs = [], []
    coset1 = params["coset1_vectors"]
    for t in range(17):
        alphabet = bits.gamma() - 1
        n = vectors if t == 0 else (coset1 if t % 2 == 0 else vectors - coset1)
        if alphabet == 0:
            meta += [0, 0, len(freqs), 0]
            continue
        z = bits.gamma() - 1
        sym_min = z // 2 if z % 2 == 0 else -(z + 1) // 2
        meta += [n, sym_min, len(freqs), alphabet]
        freqs += [bits.gamma() - 1 for _ in range(alphabet)]
    assert bits.done()
    halves = struct.unpack("<%de" % rows, bufs["f16_scales"])
    scales = [math.ldexp(h, params["scale_shift"]) for h in halves]
    return {"payload": payload, "offsets": offsets, "states": states, "stream_meta": meta, "freq_tables": freqs,
            "scales": scales}


def main(epk_tool, make_demo, work):
    os.makedirs(work, exist_ok=True)
    model, epk, out = os.path.join(work, "model"), os.path.join(work, "n.epk"), os.path.join(work, "n.safetensors")
    run = lambda *a: subprocess.run(a, check=True, stdout=subprocess.DEVNULL)  # noqa: E731
    if not os.path.exists(model):
        run(make_demo, model, "--layers", "1", "--hidden", "128")
    run(epk_tool, "compress", model, "-o", epk, "--bpp", "3", "--profile", "native", "--device", "cpu")
    run(epk_tool, "decompress", epk, "-o", out, "--dtype", "fp32", "--device", "cpu")
    decoded = stream_decoder.read_safetensors(out)
    checked = failures = 0
    for name, shape, encoding, params, bufs in read_epk_index(epk):
        if encoding != 1 or params.get("profile") != "native":
            continue
        b = expand(params, bufs)
        rows, cols, values = stream_decoder.decode_parts(params["rows"], params["cols"], params["padded_cols"],
                                                         params["prob_bits"], params["tile_symbols"], b)
        got = b"".join(struct.pack("<f", x) for x in values)
        if [rows, cols] != shape or got != decoded[name][2]:
            print("FAIL %s: the document's expansion decodes to other weights than epk decompress" % name)
            failures += 1
        checked += 1
    print("%d native tensors checked" % checked)
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
