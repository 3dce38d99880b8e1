"""epk.torch: a transformers (or diffusers) model whose weights epkd serves.

    import epk, epk.torch
    client = epk.Client()
    model = epk.torch.load("path/to/config_dir", client, "llama")        # no BF16 copy of the weights ever exists
    # or, for a model already built: epk.torch.attach(model, client, "llama")
    logits = model(input_ids.cuda()).logits

Blocks are the model's decoder layers (the classes named by ``_no_split_modules``; for a diffusers transformer
without it, the modules of its ``transformer_blocks`` / ``single_transformer_blocks`` / ``blocks`` / ``layers``
lists). Inside a block, every parameter of two or more dimensions is *streamed*: it leaves the module at attach (a
placeholder takes its place: one zero element on the device, expanded to the shape), a forward pre-hook acquires
it from epkd (prefetching the next ``prefetch`` blocks' weights, wrapping around to the first blocks for the next
forward), swaps it in as a zero-copy view, and a forward hook releases it with a fence recorded on the compute
stream (torch's current stream), so that epkd reuses the bytes only after the block's kernels are done. Everything
else (norms, biases, embeddings, the LM head) is acquired once and kept, pinned, for the attachment's life.

Every parameter is matched to the epkd tensor of the same name (or ``rename(name)``) by shape and dtype at attach;
a missing or mismatched tensor is an error naming both sides. Streamed tensors are checked against epkd's tensor
listing (Client.tensors: no decode at attach), so two faults surface only at the first forward that acquires the
tensor: a corrupt tile (epk.DecodeError) and a stored tensor the layout cannot serve (an integer raw tensor under a
dense layout: epk.Unsupported, naming it). Kept tensors are acquired at attach and checked as served.

CUDA graphs: attach(..., decode="client", static=True) keeps every weight at one address and makes each forward
enqueue and wait for its own decodes, so a forward captured with torch.cuda.graph replays with its decodes (see
_torch_client_decode). The other modes swap tensors between epkd's slots: do not capture them in a graph.

Tensor parallelism: attach(..., rank=r, world_size=n) serves each parameter named in TP_PLAN as this rank's shard
(epk.Shard.split, epkd's even-split rule): column-parallel layers (q/k/v/gate/up projections) their rows (output
features), row-parallel layers (o/down projections) their columns (input features); everything else whole. epkd
decodes only the shard. A parameter whose shape is the whole tensor's is replaced by one of the shard's shape: the
model's forward must then be tensor-parallel itself (sum, or all-reduce, the row-parallel layers' outputs over the
ranks: scripts/gpu/shard_run.py does it for a Llama block). decode="client" serves whole tensors only.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from . import _errors
from ._epk import Client, Lease, Shard

__all__ = ["attach", "load", "Attachment", "find_blocks", "TP_PLAN", "tp_shard"]

# Which dimension a tensor-parallel rank's shard of a parameter cuts, by the parameter's last three name components
# (transformers' Llama / Qwen2 / Mistral decoder names; vLLM fuses q/k/v into qkv_proj and gate/up into
# gate_up_proj, which shard the same way). "rows": column-parallel (the output features, dimension 0 of a Linear
# weight, and its bias); "cols": row-parallel (the input features, dimension 1; the bias of a row-parallel layer is
# added once, after the sum over ranks, so it stays whole). Names not listed are served whole to every rank.
TP_PLAN: Dict[str, str] = {
    "self_attn.q_proj.weight": "rows", "self_attn.k_proj.weight": "rows", "self_attn.v_proj.weight": "rows",
    "self_attn.q_proj.bias": "rows", "self_attn.k_proj.bias": "rows", "self_attn.v_proj.bias": "rows",
    "mlp.gate_proj.weight": "rows", "mlp.up_proj.weight": "rows",
    "self_attn.o_proj.weight": "cols", "mlp.down_proj.weight": "cols",
}


def tp_shard(name: str, rank: int, world_size: int, plan: Optional[Dict[str, str]] = None) -> Optional[Shard]:
    """The shard `rank` of `world_size` serves of parameter `name` under `plan` (default TP_PLAN); None: whole."""
    if world_size <= 1:
        return None
    dim = (plan if plan is not None else TP_PLAN).get(".".join(name.split(".")[-3:]))
    return None if dim is None else Shard.split(dim, rank, world_size)

_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
_DENSE = {"dense:bf16": torch.bfloat16, "dense:fp16": torch.float16, "dense:fp32": torch.float32}
_BLOCK_LISTS = ("transformer_blocks", "single_transformer_blocks", "blocks", "layers")


def find_blocks(model: torch.nn.Module) -> List[Tuple[str, torch.nn.Module]]:
    """The model's blocks in forward order: (qualified name, module)."""
    classes = set(getattr(model, "_no_split_modules", None) or ())
    if classes:
        found = [(n, m) for n, m in model.named_modules() if type(m).__name__ in classes and n]
        if found:
            # An outer block class containing an inner one (rare): keep the outermost.
            outer = [(n, m) for n, m in found if not any(n.startswith(o + ".") for o, _ in found if o != n)]
            return outer
    for n, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and n.split(".")[-1] in _BLOCK_LISTS and len(m) > 0:
            lists = [(n2, m2) for n2, m2 in model.named_modules()
                     if isinstance(m2, torch.nn.ModuleList) and n2.split(".")[-1] in _BLOCK_LISTS]
            return [(f"{ln}.{i}", b) for ln, lst in lists for i, b in enumerate(lst)]
    raise _errors.InvalidArgument(
        f"epk.torch: {type(model).__name__} names no blocks (_no_split_modules is empty and it has no "
        f"{'/'.join(_BLOCK_LISTS)} list)")


def _owners(model: torch.nn.Module) -> Dict[int, List[Tuple[torch.nn.Module, str, str]]]:
    """id(parameter) -> every (module, attribute, qualified name) holding it (tied weights appear more than once)."""
    out: Dict[int, List[Tuple[torch.nn.Module, str, str]]] = {}
    for mname, mod in model.named_modules(remove_duplicate=False):
        for pname, p in mod._parameters.items():
            if p is not None:
                out.setdefault(id(p), []).append((mod, pname, f"{mname}.{pname}" if mname else pname))
    return out


class _Stream:
    """One streamed parameter of a block."""

    __slots__ = ("holders", "tensor", "shape", "dtype", "placeholder")

    def __init__(self, holders, tensor, shape, dtype, device):
        self.holders = holders  # [(module, attribute)]
        self.tensor = tensor  # the epkd tensor name
        self.shape = shape
        self.dtype = dtype
        # Between forwards: one zero element on the model's device, expanded to the shape (strides 0). Not meta:
        # transformers and sentence-transformers take a model's device from its first parameter.
        self.placeholder = torch.nn.Parameter(torch.zeros(1, dtype=dtype, device=device).expand(shape),
                                              requires_grad=False)


def _set(holders, value):
    for mod, attr in holders:
        mod._parameters[attr] = value


class Attachment:
    """What attach() did to a model: its hooks and the leases it keeps. close() puts the placeholders back,
    removes the hooks and releases every lease (the model is unusable afterwards)."""

    def __init__(self, model, client, model_name, layout, prefetch, device, blocks):
        self.model = model
        self.client = client
        self.model_name = model_name
        self.layout = layout
        self.prefetch_depth = prefetch
        self.device = device  # CUDA ordinal, or None for host pools (CPU tensors)
        self.block_names = [n for n, _ in blocks]
        self.streams: List[List[_Stream]] = [[] for _ in blocks]
        self.kept: List[Lease] = []
        self._held: Dict[int, List[Lease]] = {}
        self._hooks = []
        self.client_decode = None  # decode="client": the ClientDecode state (epk/_torch_client_decode.py)
        self.shards: Dict[str, Shard] = {}  # epkd tensor name -> this rank's shard (tensor parallelism)

    def memory(self) -> Dict[str, int]:
        """GPU memory this attachment uses, in bytes: kept_bytes (weights acquired once and pinned in epkd's pool)
        and, with client-side decode, tier_bytes (epkd's compressed tier, mapped here, not this process's),
        decode_buffer_bytes (this process's decode ring: ring_slots slots of slot_bytes, at least the largest outer
        weight), plan_scratch_bytes and prefetch_depth."""
        out = {"kept_bytes": sum(lease.nbytes for lease in self.kept)}
        if self.client_decode is not None:
            out.update(self.client_decode.memory())
        return out

    # ---- DLPack to torch

    def _tensor(self, lease: Lease) -> torch.Tensor:
        if lease.on_device:
            return torch.from_dlpack(lease)  # torch passes its current stream: it waits for the decode
        # Host pools are mapped read-only; the legacy capsule carries no read-only flag, which torch may refuse.
        return torch.utils.dlpack.from_dlpack(lease.__dlpack__())

    def _acquire(self, tensor: str, param_name: str, shape, dtype) -> Tuple[Lease, torch.Tensor]:
        try:
            lease = self.client.acquire(self.model_name, tensor, self.layout, self.device or 0,
                                        shard=self.shards.get(tensor))
        except _errors.NotFound as e:
            raise _errors.NotFound(
                f"epk.torch: parameter '{param_name}' {list(shape)} of {type(self.model).__name__} has no tensor "
                f"'{tensor}' in epkd model '{self.model_name}': {e}") from e
        t = self._tensor(lease)
        if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
            lease.release()
            raise _errors.InvalidArgument(
                f"epk.torch: parameter '{param_name}' is {list(shape)} {dtype} but epkd model '{self.model_name}' "
                f"serves '{tensor}' as {list(t.shape)} {t.dtype} ({self.layout})")
        return lease, t

    def _check_listed(self, listed: Dict[str, Dict], tensor: str, param_name: str, shape, dtype) -> None:
        """What _acquire checks, from epkd's tensor listing: the name exists, the shape (of this rank's shard where it
        has one) and the layout's dtype match."""
        entry = listed.get(tensor)
        if entry is None:
            raise _errors.NotFound(
                f"epk.torch: parameter '{param_name}' {list(shape)} of {type(self.model).__name__} has no tensor "
                f"'{tensor}' in epkd model '{self.model_name}'")
        served = _DENSE[self.layout]
        served_shape = list(entry["shape"])
        shard = self.shards.get(tensor)
        if shard is not None:  # this rank is served its shard of the tensor
            axis, begin, end = shard.resolve(tuple(entry["shape"]))
            served_shape[axis] = end - begin
        if served_shape != list(shape) or served != dtype:
            what = f" (rank's shard {shard})" if shard is not None else ""
            raise _errors.InvalidArgument(
                f"epk.torch: parameter '{param_name}' is {list(shape)} {dtype} but epkd model '{self.model_name}' "
                f"serves '{tensor}' as {served_shape} {served} ({self.layout}){what}")

    # ---- hooks

    def _names(self, i: int) -> List[str]:
        return [s.tensor for s in self.streams[i]]

    def _prefetch_after(self, i: int, first: bool) -> None:
        # Block 0 asks for blocks 1..depth; every later block i for block i + depth: each block is asked for once
        # per forward, `depth` blocks ahead. Past the last block this wraps to the first (the next forward).
        n = len(self.streams)
        ahead = range(1, self.prefetch_depth + 1) if first else (self.prefetch_depth,)
        names: List[str] = []
        for j in sorted({(i + k) % n for k in ahead} - {i}):
            names += self._names(j)
        self._prefetch(names)

    def _prefetch(self, names: List[str]) -> None:
        # One request per shard (a prefetch carries one shard for all its names).
        groups: Dict[Optional[Shard], List[str]] = {}
        for name in names:
            groups.setdefault(self.shards.get(name), []).append(name)
        for shard, group in groups.items():
            self.client.prefetch(self.model_name, group, self.layout, self.device or 0, shard=shard)

    def _pre(self, i: int):
        def hook(module, args):
            if self.prefetch_depth > 0:
                self._prefetch_after(i, first=(i == 0))
            held = []
            try:
                for s in self.streams[i]:
                    lease, t = self._acquire(s.tensor, s.tensor, s.shape, s.dtype)
                    held.append(lease)
                    _set(s.holders, torch.nn.Parameter(t, requires_grad=False))
            except BaseException:
                self._drop(i, held)
                raise
            self._held[i] = held

        return hook

    def _post(self, i: int):
        def hook(module, args, output):
            self._drop(i, self._held.pop(i, []))

        return hook

    def _drop(self, i: int, held: Sequence[Lease]) -> None:
        for s in self.streams[i]:
            _set(s.holders, s.placeholder)
        stream = torch.cuda.current_stream(self.device) if self.device is not None else None
        for lease in held:
            lease.release(after=stream)  # the fence: after the block's kernels on the compute stream

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self.client_decode is not None:
            self.client_decode.close()
            self.client_decode = None
        for i, held in list(self._held.items()):
            self._drop(i, held)
        self._held = {}
        stream = torch.cuda.current_stream(self.device) if self.device is not None else None
        for lease in self.kept:
            lease.release(after=stream)
        self.kept = []


def attach(model: torch.nn.Module, client: Client, model_name: str, *, layout: str = "dense:bf16",
           prefetch: Optional[int] = None, device: Optional[int] = None,
           rename: Optional[Callable[[str], str]] = None, decode: str = "daemon",
           max_decoded_gb: Optional[float] = None, static: bool = False, rank: int = 0, world_size: int = 1,
           tp_plan: Optional[Dict[str, str]] = None, max_gpu_gb: Optional[float] = None) -> Attachment:
    """Serves `model`'s weights from epkd model `model_name` (see the module's docstring).

    rank, world_size: tensor parallelism; each parameter tp_shard() names (tp_plan, default TP_PLAN) is served as
    this rank's shard, and a parameter of the whole tensor's shape is replaced by one of the shard's shape.

    layout: dense:bf16, dense:fp16 or dense:fp32, matching the model's parameter dtypes. device: the CUDA device
    whose pool serves the weights (default: torch's current device when the daemon serves device pools; with host
    pools the weights are CPU tensors). rename: parameter name -> epkd tensor name (default: the same name).
    Buffers are moved to the device. Returns an Attachment; keep it (or the model) alive while the model runs.

    decode: "daemon" (epkd decodes into its slots; prefetch, default 2, is the number of blocks epkd decodes ahead)
    or "client" (this process decodes the lattice-rans weights itself from epkd's compressed tier on the GPU, on a
    side stream, `prefetch` units ahead of the compute stream, into a decode buffer it owns: epk.stored; needs
    the package built with client-side decode (epk.stored.available()) and epkd's leave (same user by default:
    client_decode_uids)). In client mode
    the token embedding and the LM head are decoded at every forward too when they are compressed; everything not in
    the tier is acquired from epkd as in daemon mode. prefetch=None: a ring of two blocks, the depth checked against
    the decode time measured at attach and one block's compute time measured in the second forward (a warning says
    when a deeper prefetch would keep the decode ahead). max_decoded_gb bounds the decode buffer (the block ring,
    which also holds the largest outer weight); the ring then holds fewer blocks. Attachment.memory() says what the
    buffers take.

    A model larger than its GPU share: where epkd's tier_budget_mb leaves the model's tier no room on the GPU, epkd
    keeps it in its host tier (host memory shared read-only with every client) and the client decodes from there.
    max_gpu_gb is then the attachment's one GPU memory limit for client-side decode: the decode buffer, a staging
    ring of two units' compressed inputs, and the share of the tier kept on the GPU (the embedding and the LM head
    first, then blocks in forward order); every other unit's compressed inputs are copied over PCIe before its
    decode, on a copy stream, ahead of the compute. None: the whole tier is kept on the GPU. With epkd's device tier
    (epkd's memory) max_gpu_gb bounds the decode buffer only.
    Attachment.memory() reports the split (resident_tier_bytes, streamed_tier_bytes, staging_bytes).

    static=True (decode="client" only): every weight stays at one address for the attachment's life and a forward's
    decodes are all enqueued, and waited on, within that forward, so a forward can be captured in a CUDA graph
    (torch.cuda.graph) and replayed: the replay decodes the weights again into the same slots. Block weights that
    are not in the tier are acquired once and kept (as norms are). The prefetch depth is fixed (prefetch, default
    ring slots - 1). Between replays the inputs are the graph's static tensors, as with any CUDA graph.
    """
    if layout not in _DENSE:
        raise _errors.InvalidArgument(f"epk.torch: layout '{layout}': attach serves dense layouts "
                                      f"({', '.join(_DENSE)})")
    if decode not in ("daemon", "client"):
        raise _errors.InvalidArgument(f"epk.torch: decode='{decode}': 'daemon' or 'client'")
    if prefetch is None and decode == "daemon":
        prefetch = 2
    if prefetch is not None and prefetch < 0:
        raise _errors.InvalidArgument("epk.torch: prefetch must be >= 0")
    if device is None and client.has_device_pools:
        device = torch.cuda.current_device()
    if decode == "client" and device is None:
        raise _errors.Unsupported("epk.torch: decode='client' needs epkd serving a device pool (a CUDA device)")
    if static and decode != "client":
        raise _errors.InvalidArgument("epk.torch: static=True needs decode='client' (epkd's slots move between "
                                      "acquires; the client's ring does not)")
    if world_size < 1 or not 0 <= rank < world_size:
        raise _errors.InvalidArgument(f"epk.torch: rank {rank} of world_size {world_size}")
    if world_size > 1 and decode == "client":
        raise _errors.Unsupported("epk.torch: decode='client' decodes whole tensors; tensor-parallel shards come "
                                  "from epkd (decode='daemon')")
    rename = rename or (lambda n: n)
    blocks = find_blocks(model)
    # prefetch_depth: what epkd decodes ahead for the blocks' daemon-served weights (all of them with decode="daemon").
    att = Attachment(model, client, model_name, layout, 2 if prefetch is None else prefetch, device, blocks)
    if world_size > 1:
        _shard_parameters(model, att, client, model_name, rename, rank, world_size, tp_plan)
    block_of: Dict[int, int] = {}
    for bi, (_, b) in enumerate(blocks):
        for p in b.parameters():
            block_of.setdefault(id(p), bi)
    target = torch.device("cuda", device) if device is not None else torch.device("cpu")
    owners = _owners(model)
    streamed: List[Tuple[int, str, int]] = []  # (block, qualified name, id(param))
    tier = None
    client_params: Dict[int, Tuple[str, str]] = {}  # id(param) -> (unit module name, qualified name)
    if decode == "client":
        from .stored import StoredTier
        tier = StoredTier(client, model_name, device)  # set up over the attachment's own connection
        module_names = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}
        block_name = {bi: n for bi, (n, _) in enumerate(blocks)}
        for pid, holders in owners.items():
            mod0, attr0, qname = holders[0]
            p = mod0._parameters[attr0]
            if p.dim() < 2 or not tier.holds(rename(qname), layout):
                continue
            bi = block_of.get(pid)
            if bi is not None:
                client_params[pid] = (block_name[bi], qname)
            elif len({id(m) for m, _, _ in holders}) == 1:  # one module outside the blocks (a tied weight is kept)
                client_params[pid] = (module_names[id(mod0)], qname)
    try:
        for pid, holders in owners.items():
            mod0, attr0, qname = holders[0]
            p = mod0._parameters[attr0]
            if pid in client_params:
                continue
            bi = block_of.get(pid)
            if bi is not None and p.dim() >= 2 and not static:
                streamed.append((bi, qname, pid))
                continue
            lease, t = att._acquire(rename(qname), qname, p.shape, p.dtype)
            att.kept.append(lease)
            _set([(m, a) for m, a, _ in holders], torch.nn.Parameter(t, requires_grad=False))
        for bi, qname, pid in streamed:
            holders = owners[pid]
            p = holders[0][0]._parameters[holders[0][1]]
            att.streams[bi].append(
                _Stream([(m, a) for m, a, _ in holders], rename(qname), tuple(p.shape), p.dtype, target))
        # Every streamed tensor is matched against epkd's listing (no decode), then its weight leaves the module.
        listed = {t["name"]: t for t in client.tensors(model_name)}
        for bi, qname, pid in streamed:
            p = owners[pid][0][0]._parameters[owners[pid][0][1]]
            att._check_listed(listed, rename(qname), qname, p.shape, p.dtype)
        for bi in range(len(blocks)):
            for s in att.streams[bi]:
                _set(s.holders, s.placeholder)
        for mod in model.modules():
            for bname, buf in list(mod._buffers.items()):
                if buf is not None and buf.device != target:
                    mod._buffers[bname] = buf.to(target)
        if tier is not None:
            att.client_decode = _client_decode(model, att, tier, owners, client_params, layout, rename, target,
                                               prefetch, max_decoded_gb, static, max_gpu_gb)
            tier = None  # the ClientDecode owns it now
    except BaseException:
        if tier is not None:
            tier.close()
        att.close()
        raise
    for bi, (_, b) in enumerate(blocks):
        if att.streams[bi]:
            att._hooks.append(b.register_forward_pre_hook(att._pre(bi)))
            att._hooks.append(b.register_forward_hook(att._post(bi)))
    if att.client_decode is not None:
        cd = att.client_decode
        modules = dict(model.named_modules(remove_duplicate=False))
        for ui, u in enumerate(cd.units):
            m = modules[u.name]
            att._hooks.append(m.register_forward_pre_hook(lambda mod, args, ui=ui: cd.pre(ui)))
            att._hooks.append(m.register_forward_hook(lambda mod, args, out, ui=ui: cd.post(ui)))
    model._epk_attachment = att  # the model keeps its attachment (hooks and kept leases) alive
    return att


def _shard_parameters(model, att, client, model_name, rename, rank, world_size, tp_plan) -> None:
    """This rank's shard of every parameter the plan names (att.shards), and the parameters resized to it: a
    parameter of the whole tensor's shape gets a meta placeholder of the shard's shape (attach then swaps in the
    served shard), one already of the shard's shape (a model built tensor-parallel) is left as it is."""
    full = {t["name"]: tuple(t["shape"]) for t in client.tensors(model_name)}
    for mname, mod in model.named_modules():
        for pname, p in list(mod._parameters.items()):
            if p is None:
                continue
            qname = f"{mname}.{pname}" if mname else pname
            shard = tp_shard(qname, rank, world_size, tp_plan)
            tensor = rename(qname)
            if shard is None or tensor not in full:
                continue  # a missing tensor is reported by attach's own check, naming both sides
            axis, begin, end = shard.resolve(full[tensor])
            part = list(full[tensor])
            part[axis] = end - begin
            att.shards[tensor] = shard
            if tuple(p.shape) == tuple(part):
                continue
            if tuple(p.shape) != full[tensor]:
                raise _errors.InvalidArgument(
                    f"epk.torch: parameter '{qname}' is {list(p.shape)}: neither epkd's '{tensor}' "
                    f"{list(full[tensor])} nor rank {rank} of {world_size}'s shard {part} of it")
            mod._parameters[pname] = torch.nn.Parameter(torch.empty(part, dtype=p.dtype, device="meta"),
                                                        requires_grad=False)


def _client_decode(model, att, tier, owners, client_params, layout, rename, target, prefetch, max_decoded_gb,
                   static, max_gpu_gb):
    """The units of client-side decode, in module order (forward order for transformers models), and their state."""
    from ._torch_client_decode import ClientDecode, _Unit, _aligned

    by_unit: Dict[str, "_Unit"] = {}
    block_names = set(att.block_names)
    for pid, (unit_name, qname) in client_params.items():
        holders = owners[pid]
        p = holders[0][0]._parameters[holders[0][1]]
        tensor = rename(qname)
        stored = tier.shape(tensor)
        want = tier.decoded_bytes(tensor, layout)
        if tuple(stored) != tuple(p.shape) or want != p.numel() * p.element_size():
            raise _errors.InvalidArgument(
                f"epk.torch: parameter '{qname}' is {list(p.shape)} {p.dtype} but epkd model '{att.model_name}' "
                f"stores '{tensor}' as {list(stored)} ({want} bytes in {layout})")
        u = by_unit.setdefault(unit_name, _Unit(unit_name))
        u.ring = "block" if unit_name in block_names else "outer"
        placeholder = torch.nn.Parameter(torch.zeros(1, dtype=p.dtype, device=target).expand(p.shape),
                                         requires_grad=False)
        hs = [(m, a) for m, a, _ in holders]
        u.params.append((hs, tensor, tuple(p.shape), p.dtype, placeholder, want))
        u.bytes += _aligned(want)
        _set(hs, placeholder)
    order = [n for n, _ in model.named_modules(remove_duplicate=False) if n in by_unit]
    units = [by_unit[n] for n in order]
    limit = None if max_decoded_gb is None else int(max_decoded_gb * 2**30)
    gpu_limit = None if max_gpu_gb is None else int(max_gpu_gb * 2**30)
    return ClientDecode(att.device, tier, units, layout, prefetch, limit, static, gpu_limit)


@contextlib.contextmanager
def _parameters_on_meta():
    """Parameters created inside go to the meta device; buffers (rotary tables, position ids) are built normally."""
    register = torch.nn.Module.register_parameter

    def on_meta(self, name, param):
        register(self, name, param)
        if param is not None:
            cls = type(self._parameters[name])
            self._parameters[name] = cls(self._parameters[name].to("meta"), requires_grad=param.requires_grad)

    torch.nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


def load(config_or_dir, client: Client, model_name: str, *, layout: str = "dense:bf16",
         prefetch: Optional[int] = None, device: Optional[int] = None, model_class=None,
         rename: Optional[Callable[[str], str]] = None, decode: str = "daemon",
         max_decoded_gb: Optional[float] = None, static: bool = False, rank: int = 0, world_size: int = 1,
         tp_plan: Optional[Dict[str, str]] = None, max_gpu_gb: Optional[float] = None):
    """Builds a transformers model from its config (a PretrainedConfig or a directory / hub name holding
    config.json) with its parameters on the meta device, then attaches it: no copy of the weights is ever made in
    this process. model_class: the transformers class (default: the config's architectures[0], else AutoModel).
    Returns the model (its Attachment is model._epk_attachment). The model is in eval mode."""
    import transformers

    config = config_or_dir
    if not isinstance(config, transformers.PretrainedConfig):
        config = transformers.AutoConfig.from_pretrained(config_or_dir)
    if model_class is None:
        arch = (getattr(config, "architectures", None) or [None])[0]
        model_class = getattr(transformers, arch, None) if arch else None
    dtype = _DENSE.get(layout, torch.bfloat16)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with _parameters_on_meta():
            if model_class is None:
                model = transformers.AutoModel.from_config(config)
            else:
                model = model_class(config)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    attach(model, client, model_name, layout=layout, prefetch=prefetch, device=device, rename=rename, decode=decode,
           max_decoded_gb=max_decoded_gb, static=static, rank=rank, world_size=world_size, tp_plan=tp_plan,
           max_gpu_gb=max_gpu_gb)
    return model
