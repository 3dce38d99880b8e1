"""The parts of epk-calibrate that need no torch: which checkpoint tensors `epk compress` encodes (and so can use
statistics), the mapping of a model's parameter names to the checkpoint's tensor names, the second-moment
accumulator, and the statistics file's tensors (docs/FORMAT.md 12).

The accumulator takes NumPy arrays or torch tensors alike (it uses only reshape, boolean indexing, .T and @), so the
torch path accumulates on the GPU with the same code the NumPy tests check."""

import json
import os
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import numpy as np

from ._safetensors import read_header

HESSIAN_SUFFIX = ".hessian"
TOKENS_SUFFIX = ".tokens"

# The dtypes rate::encode takes (codec/rate/encode.cc, encode_input_supported).
ENCODABLE_DTYPES = frozenset({"F32", "BF16", "F16", "F8_E4M3", "F8_E5M2", "I8"})
# rate::is_embedding's patterns (codec/rate/compress_plan.cc): fnmatch without flags, so '*' also matches '.'.
EMBEDDING_PATTERNS = ("*embed*", "*wte.*", "*wpe.*", "*tok_embeddings*")

PathLike = Union[str, os.PathLike]
# name -> (safetensors dtype, shape)
TensorInfo = Tuple[str, Tuple[int, ...]]


def is_embedding(name: str) -> bool:
    return any(fnmatchcase(name, p) for p in EMBEDDING_PATTERNS)


def why_not_encoded(name: str, dtype: str, shape: Tuple[int, ...], include_embeddings: bool) -> Optional[str]:
    """None when `epk compress` (without rules) encodes the tensor, else why it stays raw: steps 2 and 3 of
    rate::plan_tensor (codec/rate/compress_plan.h). Statistics of a raw tensor would be accepted and unused."""
    if len(shape) != 2:
        return "1-D" if len(shape) == 1 else "not 2-D"
    if not (0 < shape[0] < 2**32 and 0 < shape[1] < 2**32) or dtype not in ENCODABLE_DTYPES:
        return f"dtype {dtype}"
    if not include_embeddings and is_embedding(name):
        return "embedding (give --include-embeddings, as to epk compress)"
    return None


def checkpoint_files(model_dir: PathLike) -> List[Path]:
    """The safetensors files of the checkpoint `epk compress MODEL_DIR` opens, chosen the same way
    (safetensors::Checkpoint, codec/safetensors/checkpoint.cc): model.safetensors.index.json, else model.safetensors,
    else the one *.safetensors.index.json, else the one *.safetensors. Raises ValueError naming the folder."""
    d = Path(model_dir)
    index: Optional[Path] = None
    if (d / "model.safetensors.index.json").is_file():
        index = d / "model.safetensors.index.json"
    elif (d / "model.safetensors").is_file():
        return [d / "model.safetensors"]
    else:
        names = sorted(p for p in d.iterdir() if p.is_file()) if d.is_dir() else []
        indexes = [p for p in names if p.name.endswith(".safetensors.index.json")]
        files = [p for p in names if p.name.endswith(".safetensors")]
        if len(indexes) > 1:
            raise ValueError(f"{d}: {len(indexes)} *.safetensors.index.json files and no model.safetensors.index.json")
        if indexes:
            index = indexes[0]
        elif len(files) == 1:
            return files
        elif not files:
            raise ValueError(f"{d}: no .safetensors file or index in the directory (epk compress reads safetensors)")
        else:
            raise ValueError(f"{d}: {len(files)} .safetensors files but no index")
    with open(index) as f:
        weight_map = json.load(f).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{index}: no weight_map")
    return [d / s for s in sorted(set(weight_map.values()))]


def checkpoint_tensors(model_dir: PathLike) -> Dict[str, TensorInfo]:
    """{tensor name: (dtype, shape)} of the checkpoint in `model_dir`, from the safetensors headers alone."""
    out: Dict[str, TensorInfo] = {}
    for path in checkpoint_files(model_dir):
        header, _ = read_header(path)
        for name, e in header.items():
            out[name] = (str(e["dtype"]), tuple(int(s) for s in e["shape"]))
    return out


def checkpoint_key(param: str, keys: Iterable[str]) -> Optional[str]:
    """The checkpoint tensor that holds the model's parameter `param`: the same name, else the one name that differs
    from it by leading dotted components only (a model class that strips its base-model prefix, "layers.0.x.weight"
    for "model.layers.0.x.weight", or one that adds it). None when no name matches; ValueError naming both when
    more than one does."""
    keys = list(keys)
    if param in keys:
        return param
    found = [k for k in keys if k.endswith("." + param) or param.endswith("." + k)]
    if len(found) > 1:
        raise ValueError(f"parameter '{param}' matches several checkpoint tensors: {', '.join(sorted(found)[:4])}")
    return found[0] if found else None


def masked_rows(x: Any, mask: Any, cols: int) -> Any:
    """x ([..., cols]) as rows [tokens, cols], keeping the rows whose mask entry is true; mask: None (every row) or a
    boolean array of x's leading shape (an attention mask, padding false)."""
    rows = x.reshape(-1, cols)
    if mask is None:
        return rows
    m = mask.reshape(-1)
    if m.shape[0] != rows.shape[0]:
        raise ValueError(f"mask of {m.shape[0]} entries for {rows.shape[0]} rows of input")
    return rows[m]


class HessianAccumulator:
    """H = sum over tokens of x x^T and the token count, for one linear layer with `cols` inputs.

    h0: the zero matrix to accumulate into, F32 [cols, cols] (a NumPy array, or a torch tensor on the device the
    inputs come from). Inputs are converted to F32 before the product: H is summed in F32 as the file stores it."""

    def __init__(self, cols: int, h0: Any = None):
        self.cols = cols
        self.h = np.zeros((cols, cols), np.float32) if h0 is None else h0
        if tuple(self.h.shape) != (cols, cols):
            raise ValueError(f"accumulator of shape {tuple(self.h.shape)} for {cols} columns")
        self.tokens = 0

    def add(self, x: Any, mask: Any = None) -> None:
        rows = masked_rows(x, mask, self.cols)
        if isinstance(rows, np.ndarray):
            rows = rows.astype(np.float32, copy=False)
        else:
            rows = rows.to(self.h.dtype)
        self.h += rows.T @ rows
        self.tokens += int(rows.shape[0])

    def hessian(self) -> np.ndarray:
        """H as F32 NumPy, made exactly symmetric: (H + H^T) / 2 is the same Gram matrix up to the rounding of the
        sums (which a GPU's blocked product does not keep symmetric)."""
        h = self.h if isinstance(self.h, np.ndarray) else self.h.detach().cpu().numpy()
        h = np.asarray(h, dtype=np.float32)
        return ((h + h.T) * np.float32(0.5)).astype(np.float32)


def statistics_tensors(layers: Mapping[str, HessianAccumulator]) -> Dict[str, np.ndarray]:
    """The statistics file's tensors for {checkpoint weight name: accumulator}: NAME.hessian (F32 [cols, cols]) and
    NAME.tokens (an I64 scalar), in the mapping's order. Raises ValueError naming the weight when it saw no token
    or its H is not finite (F32 overflow: activations too large to sum in F32)."""
    out: Dict[str, np.ndarray] = {}
    for name, acc in layers.items():
        if acc.tokens <= 0:
            raise ValueError(f"weight '{name}': no calibration token reached its layer")
        h = acc.hessian()
        if not np.isfinite(h).all():
            raise ValueError(f"weight '{name}': H has non-finite entries (its inputs overflow F32 sums)")
        out[name + HESSIAN_SUFFIX] = h
        out[name + TOKENS_SUFFIX] = np.array(acc.tokens, dtype=np.int64)
    return out
