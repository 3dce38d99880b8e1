"""A safetensors reader of headers and a writer of NumPy arrays, with NumPy and the standard library only (the
`safetensors` package is not a dependency of epk).

Layout (the safetensors format): an 8-byte little-endian header length N, N bytes of JSON {name: {"dtype", "shape",
"data_offsets": [begin, end]}, optionally "__metadata__": {str: str}}, then the tensors' bytes, little-endian and
row-major, at those offsets from the end of the header."""

import json
import os
import struct
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple, Union

import numpy as np

# NumPy dtype -> safetensors dtype name, for the dtypes the writer takes.
_NAMES = {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.float16): "F16",
          np.dtype(np.int64): "I64", np.dtype(np.int32): "I32", np.dtype(np.int16): "I16", np.dtype(np.int8): "I8",
          np.dtype(np.uint64): "U64", np.dtype(np.uint32): "U32", np.dtype(np.uint16): "U16",
          np.dtype(np.uint8): "U8", np.dtype(np.bool_): "BOOL"}

# A header longer than this is not a safetensors file's (the format's own readers refuse past 100 MB).
_MAX_HEADER = 100 * 1000 * 1000

PathLike = Union[str, os.PathLike]


def write_safetensors(path: PathLike, tensors: Mapping[str, np.ndarray],
                      metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes `tensors` (in their mapping order, each at the next offset) to `path`, through a temporary file in the
    same folder renamed into place, so that a reader never sees a partial file. Raises ValueError naming a tensor
    whose dtype has no safetensors name, or a name that is not a non-empty str."""
    header: Dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    arrays = []
    offset = 0
    for name, a in tensors.items():
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise ValueError(f"write_safetensors: tensor name {name!r} is not a valid safetensors name")
        a = np.asarray(a)
        dt = _NAMES.get(a.dtype.newbyteorder("="))
        if dt is None:
            raise ValueError(f"write_safetensors: tensor '{name}': dtype {a.dtype} has no safetensors name")
        # Little-endian and row-major: the bytes as the file holds them (not ascontiguousarray, which makes a
        # scalar 1-D).
        a = np.asarray(a, dtype=a.dtype.newbyteorder("<"), order="C")
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        arrays.append(a)
    h = json.dumps(header, separators=(",", ":")).encode()
    # Padded with spaces to a multiple of 8, so that the data (and every 8-byte-aligned offset) is aligned in a map.
    h += b" " * (-len(h) % 8)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(h)))
            f.write(h)
            for a in arrays:
                if a.nbytes:
                    f.write(memoryview(a.reshape(-1)).cast("B"))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_header(path: PathLike) -> Tuple[Dict[str, dict], int]:
    """The header of a safetensors file without its "__metadata__" entry, and the offset its data starts at.
    Raises ValueError naming the file when it is not a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        (n,) = struct.unpack("<Q", raw)
        if n > _MAX_HEADER:
            raise ValueError(f"{path}: not a safetensors file (header length {n})")
        text = f.read(n)
    if len(text) != n:
        raise ValueError(f"{path}: not a safetensors file (truncated header)")
    try:
        header = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{path}: not a safetensors file (header is not JSON: {e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: not a safetensors file (header is not a JSON object)")
    header.pop("__metadata__", None)
    return header, 8 + n
