"""Client-side decode from a host tier (epk._torch_client_decode): when epkd keeps the model's tier in host memory
(its tier_budget_mb leaves no room on the GPU), the compressed tier is epkd's host tier mapped here read-only and
page-locked (epk.stored's host tier), and each unit's inputs reach the GPU one of two ways:

- resident: copied once at attach into one device buffer, as many units as the attachment's GPU limit leaves room
  for beside the staging ring (the policy: outer units first, decoded at every forward, then blocks in forward
  order);
- streamed: before each decode, copied into a staging ring slot on a copy stream of its own, so the copy of the next
  unit overlaps the decode of this one and the compute of the one before.

A unit's tensors' inputs are laid out one after the other in tier order, each 256-aligned as in the tier, so the
tensors that are adjacent in the tier (a block's, unless a checkpoint shard boundary splits it) go in one copy
(DecodeBatch.enqueue_copy merges them) and no other tensor's bytes cross PCIe.

Ordering of a streamed unit, all stream-ordered: the copy stream waits until the decode of the staging slot's
previous user is done (its consumed event, recorded on the side stream), copies, and records the unit's copied event;
the side stream waits on it before the decode.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import torch

from . import _errors

_ALIGN = 256  # staged inputs start 256-byte aligned (the tier's own alignment; the decode buffer uses it too)


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class HostInputs:
    """Where each unit's decode inputs are on the GPU, and the copies that put them there."""

    def __init__(self, device: torch.device, tier, units, staging_slots: int, budget: Optional[int]):
        """budget: the bytes for the resident share and the staging ring together (None: every unit resident)."""
        self.tier = tier
        self.copy = torch.cuda.Stream(device=device)
        # Per unit: its tensors' inputs laid out one after the other in tier order, each 256-aligned (the tier's own
        # rule, so tensors adjacent in the tier stay adjacent here and their copy is one), and the inputs' bytes.
        self.offsets: List[Dict[str, int]] = []
        self.tier_bytes_of: List[int] = []
        sizes = []
        for u in units:
            spans = sorted((tier.span(tensor), tensor) for _, tensor, *_ in u.params)
            at, offs = 0, {}
            for (_, n), tensor in spans:
                offs[tensor] = at
                at = _aligned(at + n)
            self.offsets.append(offs)
            self.tier_bytes_of.append(sum(n for (_, n), _ in spans))
            sizes.append(at)
        # The resident share is a prefix of `order` (outer units first, then blocks in forward order); the rest stream
        # through a ring of staging slots, each the largest streamed unit's size. The longest prefix that fits beside
        # a ring of `staging_slots` (where fewer units stream, one slot each); failing that, beside one slot (a copy
        # then waits for the previous unit's decode).
        order = [i for i, u in enumerate(units) if u.ring == "outer"] + \
                [i for i, u in enumerate(units) if u.ring == "block"]
        choice = None
        for slots in (staging_slots, 1):
            for r in range(len(order), -1, -1):
                streamed = order[r:]
                slot = max((sizes[i] for i in streamed), default=0)
                ring = min(slots, len(streamed))
                if budget is None or sum(sizes[i] for i in order[:r]) + ring * slot <= budget:
                    choice = (r, ring, slot)
                    break
            if choice is not None:
                break
        if choice is None:
            raise _errors.NoSpace(f"epk.torch: the GPU limit leaves {budget / 2**30:.3f} GiB beside the decode "
                                  f"buffer, less than one staging slot of "
                                  f"{max(sizes, default=0) / 2**30:.3f} GiB (the largest unit's inputs)")
        r, self.staging_slots, self.slot_bytes = choice
        self.resident_at: Dict[int, int] = {}
        used = 0
        for i in order[:r]:
            self.resident_at[i] = used
            used += sizes[i]
        self.streamed = [i for i in range(len(units)) if i not in self.resident_at]
        self.slot_of = {i: k % self.staging_slots for k, i in enumerate(self.streamed)}
        self.resident = torch.empty(max(used, 1), dtype=torch.uint8, device=device)
        self.staging = torch.empty(max(self.staging_slots * self.slot_bytes, 1), dtype=torch.uint8, device=device)
        self.consumed: List[Optional[torch.cuda.Event]] = [None] * self.staging_slots
        self.streamed_bytes = sum(self.tier_bytes_of[i] for i in self.streamed)
        self.resident_tier_bytes = sum(self.tier_bytes_of[i] for i in self.resident_at)

    def inputs_at(self, i: int, tensor: str) -> int:
        """The device address of `tensor`'s inputs for unit i's batch."""
        if i in self.resident_at:
            base = self.resident.data_ptr() + self.resident_at[i]
        else:
            base = self.staging.data_ptr() + self.slot_of[i] * self.slot_bytes
        return base + self.offsets[i][tensor]

    def place_resident(self, units, side: torch.cuda.Stream) -> None:
        """Copies the resident units' inputs once (on the side stream, before their first decode)."""
        for i in self.resident_at:
            units[i].batch.enqueue_copy(side.cuda_stream)

    def before_decode(self, i: int, u, side: torch.cuda.Stream) -> None:
        """A streamed unit's copy into its staging slot, ordered before its decode on `side`."""
        if i in self.resident_at:
            return
        s = self.slot_of[i]
        if self.consumed[s] is not None:
            self.copy.wait_event(self.consumed[s])
        u.batch.enqueue_copy(self.copy.cuda_stream)
        copied = torch.cuda.Event()
        copied.record(self.copy)
        side.wait_event(copied)

    def after_decode(self, i: int, side: torch.cuda.Stream) -> None:
        if i in self.resident_at:
            return
        ev = torch.cuda.Event()
        ev.record(side)
        self.consumed[self.slot_of[i]] = ev

    def memory(self) -> Dict[str, int]:
        return {"host_tier_bytes": self.tier.tier_bytes, "host_tier_shared": self.tier.host_tier_shared,
                "resident_tier_bytes": self.resident_tier_bytes,
                "resident_buffer_bytes": self.resident.numel(), "streamed_tier_bytes": self.streamed_bytes,
                "staging_bytes": self.staging.numel(), "staging_slots": self.staging_slots}

