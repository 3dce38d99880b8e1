#!/opt/refvenv/bin/python
"""Decodes epk-written streams with the reference package and compares with epk's own decoder output.

The input safetensors file holds, per case NAME: NAME.quant_state (uint8, the reference's state_dict blob written by
epk) and NAME.decoded.<torch dtype name> (epk's decoder output). Exit status 0 when every output matches bit for bit.
Used by tests/codec/rans/reference_live_test.cc (label `reference`).
"""
import sys

import torch
from safetensors.torch import load_file

import entropack as ep


def main(path):
    tensors = load_file(path)
    cases = sorted({k.split(".")[0] for k in tensors})
    cfg = ep.LatticeRANSConfig(execution_backend="eager")
    bad = 0
    for name in cases:
        ct = ep.CompressedTensor.unpack(tensors[f"{name}.quant_state"])
        for key, ours in tensors.items():
            if not key.startswith(f"{name}.decoded."):
                continue
            dtype = getattr(torch, key.split(".")[-1])
            theirs = ct.scheme.decode(ct.buffers, shape=tuple(ct.shape), dtype=dtype, config=cfg).contiguous()
            same = theirs.dtype == ours.dtype and theirs.shape == ours.shape and torch.equal(
                theirs.view(torch.uint8), ours.view(torch.uint8))
            if not same:
                bad += 1
                print(f"{key}: mismatch", file=sys.stderr)
    print(f"checked {len(cases)} cases, {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
