"""The reference entropack package decodes an .epk file's streams (calibrated or not) exactly as epk does.

`epk export-entropack FILE` writes every lattice-rans tensor in the package's state_dict form and `epk decompress FILE`
writes epk's own decode (the tensors' source dtype); the reference decodes each exported blob to that dtype on the
CPU (execution_backend "eager"), and every tensor must match epk's bit for bit. Exit status 0 when all do.

Usage: python scripts/calibration/reference_decode_check.py EPK FILE.epk
Needs torch, safetensors and entropack importable.
"""
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import entropack as ep
import torch
from safetensors.torch import load_file

SUFFIX = ".entropack_quant_state"


def main(epk: str, packed: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        exported, decoded = Path(tmp) / "exported.safetensors", Path(tmp) / "decoded.safetensors"
        subprocess.run([epk, "export-entropack", packed, "-o", str(exported)], check=True, capture_output=True)
        subprocess.run([epk, "decompress", packed, "-o", str(decoded)], check=True, capture_output=True)
        blobs, ours = load_file(str(exported)), load_file(str(decoded))
    cfg = ep.LatticeRANSConfig(execution_backend="eager")
    names = sorted(k[: -len(SUFFIX)] for k in blobs if k.endswith(SUFFIX))
    bad, weights, t0 = [], 0, time.monotonic()
    for name in names:
        ct = ep.CompressedTensor.unpack(blobs[name + SUFFIX])
        want = ours[name]
        theirs = ct.scheme.decode(ct.buffers, shape=tuple(ct.shape), dtype=want.dtype, config=cfg).contiguous()
        if theirs.shape != want.shape or not torch.equal(theirs.view(torch.uint8), want.view(torch.uint8)):
            bad.append(name)
            print(f"{name}: the reference's decode differs from epk's", file=sys.stderr)
        weights += want.numel()
    print(f"{packed}: {len(names)} lattice-rans tensors ({weights:,} weights) decoded by entropack "
          f"{getattr(ep, '__version__', '?')}: {len(names) - len(bad)} bit-equal to epk decompress, {len(bad)} differ "
          f"({time.monotonic() - t0:.1f} s)")
    return 1 if bad or not names else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
