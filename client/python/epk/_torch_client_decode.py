"""epk.torch's client-side decode (attach(..., decode="client")): this process decodes the model's lattice-rans
weights from epkd's compressed tier on a side stream, a few units ahead of the compute stream, into a ring of decode
buffers it owns (epk.stored). See attach()'s docstring for what a user sets. Where the tier is epkd's host tier
(in host memory, not on the GPU), epk._torch_host_tier says where each unit's inputs are copied before its decode.

Units are what the hooks stream, in forward order: the modules outside the blocks that hold a tier tensor (the
token embedding, the LM head: each decoded once per forward) and the blocks. The decode buffer is one allocation cut
into ring slots of one block's size; a block takes one slot (block i: slot i % slots), an outer unit takes the whole
buffer (the buffer is at least as large as the largest outer unit), so the embedding and the LM head cost no memory
beyond the ring. A unit's weights are decoded by one batch (one kernel launch) into fixed addresses, so its
parameters are views made once; the pre-hook swaps them in, the post-hook puts the placeholders back.

Ordering (all stream-ordered, the CPU never waits):
- unit u's decode runs on the side stream after the compute stream has finished the previous user of u's slot (the
  slot's free event, recorded by that user's post-hook), so a decode never overwrites weights still being read;
- the compute stream waits on u's ready event (recorded after its decode) before u's kernels.
A decode is issued only once its slot's previous user has posted its free event: waiting on an event not yet recorded
would wait for nothing. So at most ring-size units are in flight; the prefetch depth is what runs ahead of compute.

Static mode (attach(..., static=True), for CUDA graphs): a forward's decodes all belong to that forward, so that a
graph captured from one forward holds its decodes too. The first unit's pre-hook forks the side stream from the
compute stream (an event recorded there and waited on the side: everything before the forward, the previous
forward's reads of every slot included, is ordered before the first decode), the decodes ahead never wrap around to
the next forward's first units, and every decode issued in a forward is waited on by the compute stream in the same
forward, which joins the side stream back before the forward ends. The depth is fixed (ring slots - 1): the
automatic depth times with events, which a capture does not allow. Addresses never change: a unit's views are made
once, into the unit's fixed slot.
"""

from __future__ import annotations

import math
import warnings
from typing import Dict, List, Optional, Tuple

import torch

from . import _errors
from ._torch_host_tier import HostInputs, _aligned  # a unit's tensors start 256-byte aligned (the decoder needs 16)
from .stored import StoredTier


class _Unit:
    __slots__ = ("name", "params", "bytes", "ring", "slots", "batch", "views", "ready", "issued")

    def __init__(self, name: str):
        self.name = name
        # (holders, tensor, shape, dtype, placeholder, decoded bytes) per parameter
        self.params: List[Tuple[list, str, tuple, torch.dtype, torch.nn.Parameter, int]] = []
        self.bytes = 0
        self.ring = ""  # "block" or "outer"
        self.slots: List[int] = []  # the ring slots it occupies (an outer unit: all of them)
        self.batch = None
        self.views: List[torch.nn.Parameter] = []
        self.ready: Optional[torch.cuda.Event] = None
        self.issued = False  # decode enqueued for the coming use, not yet consumed by the pre-hook


class ClientDecode:
    """The client-side decode state of one Attachment."""

    def __init__(self, device: int, tier: StoredTier, units: List[_Unit], layout: str,
                 prefetch: Optional[int], max_decoded_bytes: Optional[int], static: bool = False,
                 max_gpu_bytes: Optional[int] = None):
        self.tier = tier
        self.static = static
        self.units = units
        self.layout = layout
        self.device = torch.device("cuda", device)
        self.side = torch.cuda.Stream(device=self.device)
        blocks = [u for u in units if u.ring == "block"]
        outer = [u for u in units if u.ring == "outer"]
        block_bytes = max((u.bytes for u in blocks), default=0)
        outer_bytes = max((u.bytes for u in outer), default=0)
        # The ring: prefetch + 1 block slots (the block computing and those decoding ahead; automatic: 2), fewer
        # if the user's limit says so (one slot still works: each decode then waits for the previous block's kernels).
        want = (prefetch if prefetch is not None else 1) + 1
        if max_decoded_bytes is not None:
            fit = max_decoded_bytes // block_bytes if block_bytes else want
            if fit < 1 or max_decoded_bytes < outer_bytes:
                raise _errors.NoSpace(
                    f"epk.torch: max_decoded_gb={max_decoded_bytes / 2**30:.3f} cannot hold one block "
                    f"({block_bytes / 2**30:.3f} GiB) or the largest outer weight ({outer_bytes / 2**30:.3f} GiB)")
            want = min(want, int(fit))
        self.ring_slots = max(1, min(want, len(blocks))) if blocks else 1
        self.auto_depth = prefetch is None and not static
        self.depth = self.ring_slots - 1 if prefetch is None else min(prefetch, self.ring_slots - 1)
        self.slot_bytes = block_bytes
        self.buffer = torch.empty(max(self.ring_slots * block_bytes, outer_bytes), dtype=torch.uint8,
                                  device=self.device)
        # A host tier: the inputs' places on the GPU (a resident share, a staging ring) within what the limit leaves.
        self.host: Optional[HostInputs] = None
        if tier.host_tier:
            if static:
                raise _errors.Unsupported("epk.torch: static=True decodes from epkd's device tier; this model's tier "
                                          "is in host memory (epkd's tier_budget_mb)")
            budget = None if max_gpu_bytes is None else max_gpu_bytes - self.buffer.numel()
            if budget is not None and budget < 0:
                raise _errors.NoSpace(f"epk.torch: max_gpu_gb={max_gpu_bytes / 2**30:.3f} cannot hold the decode "
                                      f"buffer ({self.buffer.numel() / 2**30:.3f} GiB)")
            self.host = HostInputs(self.device, tier, units, max(2, self.ring_slots), budget)
        elif max_gpu_bytes is not None and self.buffer.numel() > max_gpu_bytes:
            # epkd's device tier is epkd's memory: the limit covers only what this process allocates.
            raise _errors.NoSpace(f"epk.torch: max_gpu_gb={max_gpu_bytes / 2**30:.3f} cannot hold the decode "
                                  f"buffer ({self.buffer.numel() / 2**30:.3f} GiB)")
        # Per slot: the unit that used it last and the event its post-hook recorded (None: never used).
        self.last_user: List[Optional[int]] = [None] * self.ring_slots
        self.free: List[Optional[torch.cuda.Event]] = [None] * self.ring_slots
        bi = 0
        for ui, u in enumerate(units):
            if u.ring == "block":
                u.slots = [bi % self.ring_slots]
                bi += 1
            else:
                u.slots = list(range(self.ring_slots))
            self._plan(ui, u)
        self.posted = set()  # units whose post-hook ran since their last decode
        self.timing = {"decode_ms": None, "compute_ms": None, "wanted_depth": None}
        self._measure_decode()
        self._t0: Optional[torch.cuda.Event] = None
        self._t1: Optional[torch.cuda.Event] = None
        self._forwards = 0  # forwards begun (unit 0's pre-hooks), for the automatic depth

    # ---- set-up

    def _plan(self, i: int, u: _Unit) -> None:
        base = u.slots[0] * self.slot_bytes if u.ring == "block" else 0
        buf = self.buffer[base:base + u.bytes]
        jobs, at = [], 0
        for holders, tensor, shape, pdtype, _, n in u.params:
            job = (tensor, self.layout, buf.data_ptr() + at)
            jobs.append(job if self.host is None else job + (self.host.inputs_at(i, tensor),))
            view = buf[at:at + n].view(pdtype).view(shape)
            u.views.append(torch.nn.Parameter(view, requires_grad=False))
            at += _aligned(n)
        u.batch = self.tier.plan(jobs)

    def _measure_decode(self) -> None:
        """Decodes every unit once and checks its tiles (a corrupt tile fails attach: forwards do not read the
        status, which would wait for the stream), then times the largest block's decode on the side stream (median
        of 3), with its copy from the host tier where it has one, for the automatic depth. A host tier's resident
        share is copied first."""
        if self.host is not None:
            self.host.place_resident(self.units, self.side)
        for i, u in enumerate(self.units):
            self._decode(i, u)
            u.batch.check(self.side.cuda_stream)
        blocks = [i for i, u in enumerate(self.units) if u.ring == "block"]
        if not blocks:
            return
        i = max(blocks, key=lambda x: self.units[x].bytes)
        times = []
        for _ in range(3):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(self.side)
            if self.host is not None:
                self.host.copy.wait_event(a)  # the copy is timed too
            self._decode(i, self.units[i])
            b.record(self.side)
            b.synchronize()
            times.append(a.elapsed_time(b))
        self.timing["decode_ms"] = sorted(times)[1]

    def _decode(self, i: int, u: _Unit) -> None:
        """Unit i's decode on the side stream, after its copy where it streams from a host tier."""
        if self.host is not None:
            self.host.before_decode(i, u, self.side)
        u.batch.enqueue(self.side.cuda_stream)
        if self.host is not None:
            self.host.after_decode(i, self.side)

    # ---- the hooks' work

    def _issue(self, i: int) -> bool:
        """Enqueues unit i's decode if the previous users of its slots have posted; returns whether it is issued."""
        u = self.units[i]
        if u.issued:
            return True
        for s in u.slots:
            prev = self.last_user[s]
            if prev is not None and prev not in self.posted:
                return False  # the slot is still in use (by unit i itself too): its free event is not recorded yet
        for s in u.slots:
            if self.free[s] is not None:
                self.side.wait_event(self.free[s])
        self._decode(i, u)
        u.ready = torch.cuda.Event()
        u.ready.record(self.side)
        u.issued = True
        for s in u.slots:
            self.last_user[s] = i
        self.posted.discard(i)
        return True

    def _issue_ahead(self, i: int) -> None:
        n = len(self.units)
        for k in range(1, self.depth + 1):
            if self.static and i + k >= n:
                break  # the next forward issues its own decodes (static mode)
            if not self._issue((i + k) % n):
                break  # keep order: a later unit never overtakes an earlier one

    def _fork(self, compute) -> None:
        """Static mode, at the first unit: the side stream continues after all the compute stream's work so far,
        so every slot is free (its previous readers are ordered before) and the free events need not be waited on."""
        fork = torch.cuda.Event()
        fork.record(compute)
        self.side.wait_event(fork)
        for s in range(self.ring_slots):
            self.free[s] = None
            if self.last_user[s] is not None:
                self.posted.add(self.last_user[s])
        # Decodes a forward left unconsumed (it raised) were ordered after their slots' readers; they are decoded
        # again after the fork, in this forward.
        for u in self.units:
            u.issued = False

    def pre(self, i: int) -> None:
        u = self.units[i]
        compute = torch.cuda.current_stream(self.device)
        if self.auto_depth:
            self._auto_depth(i, compute)
        if self.static and i == 0:
            self._fork(compute)
        if not self._issue(i):
            busy = [self.units[self.last_user[s]].name for s in u.slots
                    if self.last_user[s] is not None and self.last_user[s] not in self.posted]
            raise _errors.Error(f"epk.torch: unit '{u.name}' ran while its decode buffer was still in use by "
                                f"{busy} (modules ran out of the order attach assumed)")
        compute.wait_event(u.ready)
        u.issued = False
        for (holders, *_), view in zip(u.params, u.views):
            for mod, attr in holders:
                mod._parameters[attr] = view
        self._issue_ahead(i)

    def post(self, i: int) -> None:
        u = self.units[i]
        for holders, _, _, _, placeholder, _ in u.params:
            for mod, attr in holders:
                mod._parameters[attr] = placeholder
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(self.device))
        for s in u.slots:
            self.free[s] = ev
        self.posted.add(i)
        self._issue_ahead(i)  # decodes that waited for this slot

    def _auto_depth(self, i: int, compute) -> None:
        """Times one block's compute in the second forward (events between the first two blocks' pre-hooks; the
        first forward pays one-time costs such as kernel selection) and, once done, sets the depth to the decodes
        needed to stay ahead: ceil(decode / compute), within the ring."""
        bi = [j for j, u in enumerate(self.units) if u.ring == "block"]
        if len(bi) < 2:
            self.auto_depth = False
            return
        if i == 0:
            self._forwards += 1
        if self._forwards < 2:
            return
        if i == bi[0] and self._t0 is None:
            self._t0 = torch.cuda.Event(enable_timing=True)
            self._t0.record(compute)
        elif i == bi[1] and self._t1 is None and self._t0 is not None:
            self._t1 = torch.cuda.Event(enable_timing=True)
            self._t1.record(compute)
        elif self._t1 is not None and self._t1.query():
            comp = self._t0.elapsed_time(self._t1)
            self.timing["compute_ms"] = comp
            dec = self.timing["decode_ms"] or 0.0
            wanted = max(1, math.ceil(dec / max(comp, 1e-3)))
            self.timing["wanted_depth"] = wanted
            if wanted > self.ring_slots - 1:
                warnings.warn(f"epk.torch: a block decodes in {dec:.2f} ms and computes in {comp:.2f} ms: "
                              f"prefetch={wanted} would keep the decode ahead (the ring holds {self.ring_slots})")
            self.depth = max(min(wanted, self.ring_slots - 1), 0)
            self.auto_depth = False

    def memory(self) -> Dict[str, int]:
        scratch = sum(u.batch.scratch_bytes for u in self.units if u.batch is not None)
        out = {"tier_bytes": self.tier.tier_bytes, "decode_buffer_bytes": self.buffer.numel(),
               "slot_bytes": self.slot_bytes, "plan_scratch_bytes": scratch, "ring_slots": self.ring_slots,
               "prefetch_depth": self.depth, "host_tier": self.host is not None}
        if self.host is not None:
            out.update(self.host.memory())
        return out

    def close(self) -> None:
        torch.cuda.synchronize(self.device)
        for u in self.units:
            if u.batch is not None:
                u.batch.close()
                u.batch = None
        self.tier.close()
