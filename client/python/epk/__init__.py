"""epk: the Python client of epkd, the compressed-weight server.

    import epk, numpy as np
    with epk.Client() as c:                      # $EPK_SOCKET, else /run/epkd/epkd.sock
        with c.acquire("llama", "model.layers.0.mlp.up_proj.weight", "dense:fp32") as lease:
            w = np.from_dlpack(lease)            # zero-copy view of epkd's slot (torch.from_dlpack on a GPU)
            ...                                  # use w only inside the with block

``epk.torch.attach`` serves a transformers model's weights from epkd block by block.
"""

from ._errors import (Closed, ConnectionLost, CudaError, DecodeError, Error, InvalidArgument, NoSpace, NotFound,
                      PermissionDenied, QuotaExceeded, Released, Unavailable, Unsupported)
from ._epk import DEFAULT_SOCKET, HAS_CUDA, Client, Lease, Part, Shard

LAYOUTS = ("stored", "dense:bf16", "dense:fp16", "dense:fp32", "rowwise:int8", "rowwise:fp8_e4m3", "gptq", "gptq-v2",
           "awq", "marlin")
PACKED_LAYOUTS = ("gptq", "gptq-v2", "awq", "marlin")

__version__ = "0.1.0"
__all__ = [
    "Client", "Lease", "Part", "Shard", "DEFAULT_SOCKET", "HAS_CUDA", "LAYOUTS", "PACKED_LAYOUTS", "Error", "NotFound",
    "NoSpace", "QuotaExceeded", "PermissionDenied", "DecodeError", "Unsupported", "InvalidArgument", "CudaError", "ConnectionLost", "Unavailable", "Closed",
    "Released",
]
