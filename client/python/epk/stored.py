"""Client-side decode: this process decodes lattice-rans tensors on its own CUDA streams from the compressed tier epkd
keeps on the GPU, into device memory it owns (the bytes are bit for bit what epkd serves for the same layout).

    tier = epk.stored.StoredTier(client.socket, "llama", device=0)   # epkd must allow it (same user by default)
    out = torch.empty(tier.decoded_bytes(name, "dense:bf16") // 2, dtype=torch.bfloat16, device="cuda")
    batch = tier.plan([(name, "dense:bf16", out.data_ptr())])        # one plan, scratch uploaded once
    batch.enqueue(torch.cuda.current_stream().cuda_stream)           # one kernel launch, stream-ordered
    batch.check(stream)                                              # optional: waits, names a corrupt tile

Why in this process: kernels of two processes on one GPU time-slice (unless MPS is set up), so a decode that epkd
runs while this process computes does not overlap with it; a decode on a side stream of this process does.

This talks to libepk's C ABI (libepk.so.2 of the C++ build, built with the CUDA toolkit) through ctypes: set
``EPK_LIBEPK`` to its path, or install it where the dynamic loader finds it. The tier is this process's own mapping:
it stays valid if epkd restarts (epkd's memory stays allocated while it is mapped here). Batches must be closed (or
dropped) before their tier; their outputs are the caller's memory, outside epkd's budget.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Iterable, Optional, Sequence, Tuple

from . import _epk, _errors

__all__ = ["StoredTier", "DecodeBatch", "available"]

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None


class _Job(ctypes.Structure):
    _fields_ = [("tensor", ctypes.c_char_p), ("layout", ctypes.c_char_p), ("out", ctypes.c_void_p)]


def _load() -> ctypes.CDLL:
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = os.environ.get("EPK_LIBEPK") or "libepk.so.2"
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise _errors.Unsupported(f"epk.stored: client-side decode needs libepk.so.2 built with CUDA "
                                      f"(EPK_LIBEPK={path!r}): {e}") from e
        if not hasattr(lib, "epk_stored_open"):
            raise _errors.Unsupported(f"epk.stored: {path} predates client-side decode (no epk_stored_open)")
        vp, cp = ctypes.c_void_p, ctypes.c_char_p
        sigs = {
            "epk_connect": ([cp, ctypes.POINTER(vp)], ctypes.c_int),
            "epk_disconnect": ([vp], None),
            "epk_last_error": ([], cp),
            "epk_stored_open": ([vp, cp, ctypes.c_uint32, ctypes.POINTER(vp)], ctypes.c_int),
            "epk_stored_decoded_bytes": ([vp, cp, cp, ctypes.POINTER(ctypes.c_uint64)], ctypes.c_int),
            "epk_stored_tier_bytes": ([vp], ctypes.c_uint64),
            "epk_stored_shape": ([vp, cp, ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint32,
                                  ctypes.POINTER(ctypes.c_uint32)], ctypes.c_int),
            "epk_stored_close": ([vp], None),
            "epk_batch_create": ([vp, ctypes.POINTER(_Job), ctypes.c_size_t, ctypes.POINTER(vp)], ctypes.c_int),
            "epk_batch_enqueue": ([vp, vp], ctypes.c_int),
            "epk_batch_check": ([vp, vp], ctypes.c_int),
            "epk_batch_scratch_bytes": ([vp], ctypes.c_uint64),
            "epk_batch_free": ([vp], None),
        }
        for name, (args, res) in sigs.items():
            f = getattr(lib, name)
            f.argtypes, f.restype = args, res
        _lib = lib
        return lib


def available() -> bool:
    """Whether libepk with client-side decode loads here (it does not say whether epkd allows this process)."""
    try:
        _load()
        return True
    except _errors.Error:
        return False


# C ABI status -> exception class, from libepk's one error table (shm/error_table.h) as the extension carries it.
_CODES = {status: getattr(_errors, cls) for _name, status, cls in _epk._error_table()}
_IO = {name: status for name, status, _cls in _epk._error_table()}["io"]


def _check(lib: ctypes.CDLL, rc: int, what: str, io_error=None) -> None:
    if rc != 0:
        msg = (lib.epk_last_error() or b"").decode("utf-8", "replace")
        cls = io_error if io_error is not None and rc == _IO else _CODES.get(rc, _errors.Error)
        raise cls(f"{what}: {msg}")


class _Owned:
    """An object of libepk's C ABI that close() frees (and collection, when close() was not called)."""

    _free = ""  # the C function that frees it

    def _live(self, what: str) -> ctypes.c_void_p:
        if not self._h:
            raise _errors.Closed(f"epk.stored: {what} is closed")
        return self._h

    def close(self) -> None:
        if self._h:
            getattr(self._lib, self._free)(self._h)
            self._h = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class DecodeBatch(_Owned):
    """A decode plan for several tensors into fixed device addresses (see the module's docstring)."""

    _free = "epk_batch_free"

    def __init__(self, tier: "StoredTier", handle: int):
        self._tier = tier  # the batch reads the tier: keep it alive
        self._lib = tier._lib
        self._h = ctypes.c_void_p(handle)

    @property
    def scratch_bytes(self) -> int:
        """Device memory the plan holds (descriptors, lookup tables)."""
        return int(self._lib.epk_batch_scratch_bytes(self._h)) if self._h else 0

    def enqueue(self, stream: int = 0) -> None:
        """One kernel launch on `stream` (a cudaStream_t as an int, e.g. torch's ``stream.cuda_stream``; 0: the
        legacy default stream). Stream-ordered: later work on the stream sees the output."""
        h = self._live("batch")
        _check(self._lib, self._lib.epk_batch_enqueue(h, ctypes.c_void_p(stream)), "epk.stored: enqueue")

    def check(self, stream: int = 0) -> None:
        """Waits for `stream`; raises DecodeError naming the first corrupt tile of the last decode."""
        h = self._live("batch")
        _check(self._lib, self._lib.epk_batch_check(h, ctypes.c_void_p(stream)), "epk.stored: check")


class StoredTier(_Owned):
    """epkd's compressed tier of `model` on CUDA device `device`, mapped into this process."""

    _free = "epk_stored_close"

    def __init__(self, socket: str, model: str, device: int = 0):
        self._lib = lib = _load()
        self._h = ctypes.c_void_p()
        client = ctypes.c_void_p()
        # An I/O error at connect is no epkd on the socket, as epk.Client says it.
        _check(lib, lib.epk_connect(socket.encode(), ctypes.byref(client)), f"epk.stored: connect {socket}",
               io_error=_errors.Unavailable)
        try:
            _check(lib, lib.epk_stored_open(client, model.encode(), device, ctypes.byref(self._h)),
                   f"epk.stored: model '{model}' on device {device}")
        finally:
            lib.epk_disconnect(client)  # the tier holds its own fds and mapping
        self.model = model
        self.device = device
        self._batches: "weakref.WeakSet[DecodeBatch]" = weakref.WeakSet()

    @property
    def tier_bytes(self) -> int:
        """The mapped tier's size (epkd's device memory, shared, not this process's)."""
        return int(self._lib.epk_stored_tier_bytes(self._h)) if self._h else 0

    def decoded_bytes(self, tensor: str, layout: str = "dense:bf16") -> int:
        """The bytes `tensor` takes in `layout`; Unsupported for a tensor not in the tier (acquire it from epkd)."""
        n = ctypes.c_uint64()
        _check(self._lib, self._lib.epk_stored_decoded_bytes(self._live("tier"), tensor.encode(), layout.encode(),
                                                             ctypes.byref(n)), f"epk.stored: '{tensor}'")
        return int(n.value)

    def shape(self, tensor: str) -> Tuple[int, ...]:
        """`tensor`'s shape as stored (any tensor of the model); NotFound when absent."""
        dims, ndim = (ctypes.c_uint64 * 8)(), ctypes.c_uint32()
        _check(self._lib, self._lib.epk_stored_shape(self._live("tier"), tensor.encode(), dims, 8,
                                                     ctypes.byref(ndim)), f"epk.stored: '{tensor}'")
        return tuple(int(dims[i]) for i in range(min(ndim.value, 8)))

    def holds(self, tensor: str, layout: str = "dense:bf16") -> bool:
        try:
            self.decoded_bytes(tensor, layout)
            return True
        except (_errors.Unsupported, _errors.NotFound):
            return False

    def plan(self, jobs: Sequence[Tuple[str, str, int]]) -> DecodeBatch:
        """One plan for `jobs`: (tensor, layout, device address) each, the address 16-byte aligned and
        decoded_bytes(tensor, layout) long. The plan keeps writing to those addresses at every enqueue."""
        arr = (_Job * len(jobs))()
        for i, (tensor, layout, ptr) in enumerate(jobs):  # the array keeps the encoded strings alive
            arr[i].tensor, arr[i].layout, arr[i].out = tensor.encode(), layout.encode(), ptr
        h = ctypes.c_void_p()
        _check(self._lib, self._lib.epk_batch_create(self._live("tier"), arr, len(jobs), ctypes.byref(h)),
               "epk.stored: plan")
        batch = DecodeBatch(self, h.value)
        self._batches.add(batch)
        return batch

    def close(self) -> None:
        """Frees the tier (and closes its batches first: they read it)."""
        for b in list(self._batches):
            b.close()
        super().close()
