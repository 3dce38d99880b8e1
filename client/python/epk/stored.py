"""Client-side decode: this process decodes lattice-rans tensors on its own CUDA streams from the compressed tier epkd
keeps on the GPU, into device memory it owns (the bytes are bit for bit what epkd serves for the same layout).

    with epk.Client() as c:
        tier = epk.stored.StoredTier(c, "llama", device=0)             # epkd must allow it (same user by default)
        out = torch.empty(tier.decoded_bytes(name, "dense:bf16") // 2, dtype=torch.bfloat16, device="cuda")
        batch = tier.plan([(name, "dense:bf16", out.data_ptr())])      # one plan, scratch uploaded once
        batch.enqueue(torch.cuda.current_stream().cuda_stream)         # one kernel launch, stream-ordered
        batch.check(stream)                                            # optional: waits, names a corrupt tile

Why in this process: kernels of two processes on one GPU time-slice (unless MPS is set up), so a decode that epkd
runs while this process computes does not overlap with it; a decode on a side stream of this process does.

The decoder is part of the package's extension: `pip install` builds it where the CUDA toolkit is found (nvcc and
cuda.h), with nlohmann-json's headers and libxxhash (Debian and Ubuntu have it). A package built without them serves
everything else, and StoredTier raises epk.Unsupported naming what was missing (`available()` says so first).

The tier uses the client's connection only to be set up: it then holds its own mapping, which stays valid if epkd
restarts (epkd's memory stays allocated while it is mapped here). A batch keeps its tier's mapping until the batch is
closed too. The batches' outputs are the caller's memory, outside epkd's budget.
"""

from __future__ import annotations

from . import _epk, _errors

__all__ = ["StoredTier", "DecodeBatch", "available", "missing"]


def available() -> bool:
    """Whether this package was built with client-side decode (it does not say whether epkd allows this process)."""
    return bool(_epk.CLIENT_DECODE)


def missing() -> str:
    """Why this package has no client-side decode ('' when it has)."""
    return _epk.CLIENT_DECODE_MISSING


if _epk.CLIENT_DECODE:
    StoredTier = _epk.StoredTier
    DecodeBatch = _epk.DecodeBatch
else:
    class DecodeBatch:  # type: ignore[no-redef]
        """Not in this build (see epk.stored.missing())."""

    class StoredTier:  # type: ignore[no-redef]
        """Not in this build: constructing one raises epk.Unsupported naming what the build lacked."""

        def __init__(self, client, model: str, device: int = 0):
            raise _errors.Unsupported(f"epk.stored: no client-side decode: {_epk.CLIENT_DECODE_MISSING}; "
                                      f"reinstall the package where the CUDA toolkit is found")
