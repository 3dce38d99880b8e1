"""The streaming peer of the prefill benchmark's capped setups: a BF16 prefetching offloader, as vLLM's prefetch
offloader works, written here since no installed library streams a transformers model's blocks this way. Every
decoder block's weights stay in pinned host memory; the embedding, the final norm and the LM head live on the GPU;
two GPU slots of one block's size hold the block computing and the next one, which a side stream copies while the
current block computes.

Ordering, all stream-ordered: block i's copy into slot i % 2 waits for the compute stream to finish block i - 2 (the
slot's previous user: its free event); block i's kernels wait for its copy (its ready event)."""

from __future__ import annotations

from typing import List, Optional


def offload_bf16(model, device: int = 0):
    """Moves `model` (a transformers causal LM in BF16 on the CPU) to the offloader's layout and installs its hooks.
    Returns the object that keeps the slots and the hooks."""
    return _Offloader(model, device)


class _Offloader:
    def __init__(self, model, device: int):
        import torch

        self.torch = torch
        dev = torch.device("cuda", device)
        self.blocks = list(model.model.layers)
        # Everything but the blocks goes to the GPU: embedding, final norm, rotary tables, LM head.
        for name, mod in model.named_children():
            if name != "model":
                mod.to(dev)
        for name, mod in model.model.named_children():
            if name != "layers":
                mod.to(dev)
        # Per block: its parameters as (module, attribute, pinned host tensor, offset in the slot).
        self.params: List[list] = []
        size = 0
        for b in self.blocks:
            entries, at = [], 0
            for mod in b.modules():
                for attr, p in list(mod._parameters.items()):
                    if p is None:
                        continue
                    host = p.detach().to(torch.bfloat16).contiguous().pin_memory()
                    entries.append((mod, attr, host, at))
                    at += (host.numel() * host.element_size() + 255) // 256 * 256
                    mod._parameters[attr] = None  # the CPU copy is the pinned one only
            b.to(dev)  # buffers (none in a Llama block) follow the compute
            self.params.append(entries)
            size = max(size, at)
        self.slot_bytes = size
        self.slots = [torch.empty(size, dtype=torch.uint8, device=dev) for _ in range(2)]
        self.copy = torch.cuda.Stream(device=dev)
        self.ready: List[Optional[object]] = [None] * len(self.blocks)
        self.free: List[Optional[object]] = [None, None]
        self.device = dev
        self.hooks = []
        for i, b in enumerate(self.blocks):
            self.hooks.append(b.register_forward_pre_hook(lambda m, a, i=i: self._pre(i)))
            self.hooks.append(b.register_forward_hook(lambda m, a, o, i=i: self._post(i)))
        self._issue(0)

    def _issue(self, i: int) -> None:
        torch = self.torch
        s = i % 2
        if self.free[s] is not None:
            self.copy.wait_event(self.free[s])
        slot = self.slots[s]
        with torch.cuda.stream(self.copy):
            for mod, attr, host, at in self.params[i]:
                n = host.numel() * host.element_size()
                slot[at:at + n].copy_(host.view(-1).view(torch.uint8), non_blocking=True)
        ev = torch.cuda.Event()
        ev.record(self.copy)
        self.ready[i] = ev

    def _pre(self, i: int) -> None:
        torch = self.torch
        compute = torch.cuda.current_stream(self.device)
        compute.wait_event(self.ready[i])
        slot = self.slots[i % 2]
        for mod, attr, host, at in self.params[i]:
            n = host.numel() * host.element_size()
            mod._parameters[attr] = torch.nn.Parameter(slot[at:at + n].view(host.dtype).view(host.shape),
                                                       requires_grad=False)
        self._issue((i + 1) % len(self.blocks))  # the next block (the first of the next forward after the last)

    def _post(self, i: int) -> None:
        torch = self.torch
        for mod, attr, _, _ in self.params[i]:
            mod._parameters[attr] = None
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(self.device))
        self.free[i % 2] = ev

    def memory(self) -> dict:
        return {"slot_bytes": self.slot_bytes, "slots": 2,
                "host_bytes": sum(h.numel() * h.element_size() for e in self.params for _, _, h, _ in e)}
