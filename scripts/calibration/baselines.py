"""Writes a model folder whose encoded linears are replaced by a baseline's quantize-dequantize (quantizers.py):
"nf4", "gptq" (GPTQ against the H of an epk-calibrate statistics file, the one calibrated epk uses) or "rtn" (GPTQ's
group quantizer without feedback: what GPTQ's error feedback adds over plain rounding at the same 4.25 bpp).

The tensors replaced are exactly those `epk compress` encodes without --include-embeddings (epk._calibration's
why_not_encoded: every 2-D non-embedding weight; the token embedding, and so the tied LM head, stays as it is), and
they are written back in the source's dtype (BF16 here), as `epk decompress` restores an epk file: every model of
the table is a checkpoint of the same dtype that differs from the original only in those tensors."""
import shutil
import time
from pathlib import Path
from typing import Optional

import numpy as np

import quantizers


def write_baseline(model_dir: Path, out_dir: Path, method: str, stats: Optional[Path] = None) -> dict:
    import torch
    from safetensors.numpy import load_file as load_numpy
    from safetensors.torch import load_file, save_file
    from epk._calibration import why_not_encoded

    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.copytree(model_dir, out_dir)
    tensors = load_file(str(model_dir / "model.safetensors"))
    h = load_numpy(str(stats)) if stats is not None else {}
    dtype_name = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}
    done, start = 0, time.monotonic()
    for name, t in tensors.items():
        if why_not_encoded(name, dtype_name.get(t.dtype, str(t.dtype)), tuple(t.shape), False) is not None:
            continue
        w = t.float().numpy()
        if method == "nf4":
            q = quantizers.nf4(w)
        elif method == "gptq":
            key = name + ".hessian"
            if key not in h:
                raise SystemExit(f"{stats}: no statistics for {name}")
            q = quantizers.gptq(w, h[key])
        elif method == "rtn":
            q = quantizers.rtn_groups(w)
        else:
            raise SystemExit(f"unknown baseline {method}")
        tensors[name] = torch.from_numpy(np.ascontiguousarray(q, dtype=np.float32)).to(t.dtype)
        done += 1
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    return {"tensors": done, "secs": time.monotonic() - start}
