"""epk.torch's static slots (attach(..., decode="client", static=True)) on a GPU: a captured CUDA graph replays
with its decodes, torch.compile runs through the hooks, a transformers forward captures. Skipped without torch or a
GPU; scripts/gpu/python_run.sh runs them on the GPU machine."""

import pytest

import epk
import epk_testdata
from conftest import Daemon

torch = pytest.importorskip("torch")
import epk.torch as epk_torch  # noqa: E402  (needs torch)
from torch_helpers import (MODEL, build_llama, decompressed_llama, llama_config, needs_cuda,  # noqa: E402
                           needs_client_decode, ref_tensor)


class _Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        h, f = epk_testdata.HIDDEN, epk_testdata.INTERMEDIATE
        self.gate_proj = torch.nn.Linear(h, f, bias=False)
        self.up_proj = torch.nn.Linear(h, f, bias=False)
        self.down_proj = torch.nn.Linear(f, h, bias=False)


class _Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = _Mlp()

    def forward(self, x):
        m = self.mlp
        return x + m.down_proj(torch.nn.functional.silu(m.gate_proj(x)) * m.up_proj(x))


class _Stack(torch.nn.Module):
    """The test model's MLPs alone (names as in the .epk): nothing in its forward syncs with the CPU."""

    def __init__(self):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList(_Layer() for _ in range(epk_testdata.LAYERS))

    def forward(self, x):
        for layer in self.model.layers:
            x = layer(x)
        return x


def decompressed_stack(model, dev):
    """_Stack with the decompressed test model's MLP weights, on dev."""
    ref = {n: ref_tensor(e) for n, e in model["ref"]["dense:bf16"].items()}
    reference = _Stack().to(torch.bfloat16)
    reference.load_state_dict({n: ref[n] for n, _ in reference.named_parameters()}, strict=True)
    return reference.to(dev)


def _capture(fn, *args):
    """torch's recipe: warm up on a side stream, then capture one call; returns the graph and its output."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn(*args)
    return g, out


@needs_cuda
def test_static_slots_replay_in_a_cuda_graph_with_their_decodes(bins, model):
    needs_client_decode()
    dev = torch.device("cuda", 0)
    reference = decompressed_stack(model, dev)
    g = torch.Generator().manual_seed(3)
    inputs = [torch.randn(5, epk_testdata.HIDDEN, generator=g).to(dev, torch.bfloat16) for _ in range(2)]
    with torch.no_grad():
        want = [reference(x) for x in inputs]
    d = Daemon(bins, model["epk"], budget_mb=64, cpu=False)
    try:
        with epk.Client(d.socket) as c:
            with pytest.raises(epk.InvalidArgument):
                epk_torch.attach(_Stack().to(dev, torch.bfloat16), c, MODEL, static=True)  # daemon decode moves
            m = _Stack().to(dev, torch.bfloat16)
            att = epk_torch.attach(m, c, MODEL, layout="dense:bf16", decode="client", static=True)
            assert att.memory()["ring_slots"] == 2
            x = inputs[0].clone()
            with torch.no_grad():
                assert torch.equal(m(x), want[0])  # eager, static mode
                graph, out = _capture(m, x)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, want[0])
            # The graph holds the decodes: wiped weights come back at the next replay.
            att.client_decode.buffer.zero_()
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, want[0])
            x.copy_(inputs[1])
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, want[1])
            with torch.no_grad():
                assert torch.equal(m(inputs[0]), want[0])  # eager forwards still work after the capture
            del graph
            att.close()
    finally:
        d.close()


@needs_cuda
def test_static_slots_under_torch_compile(bins, model):
    # torch.compile traces through the hooks (graph breaks at the decode calls); its kernels may round otherwise than
    # eager ones, so the reference is the same module compiled.
    needs_client_decode()
    dev = torch.device("cuda", 0)
    reference = decompressed_stack(model, dev)
    x = torch.randn(5, epk_testdata.HIDDEN, generator=torch.Generator().manual_seed(4)).to(dev, torch.bfloat16)
    with torch.no_grad():
        want = torch.compile(reference)(x)
    d = Daemon(bins, model["epk"], budget_mb=64, cpu=False)
    try:
        with epk.Client(d.socket) as c:
            m = _Stack().to(dev, torch.bfloat16)
            att = epk_torch.attach(m, c, MODEL, layout="dense:bf16", decode="client", static=True)
            compiled = torch.compile(m)
            with torch.no_grad():
                for _ in range(3):
                    assert torch.equal(compiled(x), want)
            att.close()
    finally:
        d.close()


@needs_cuda
def test_static_slots_capture_a_transformers_forward(bins, model):
    needs_client_decode()
    config = llama_config()
    dev = torch.device("cuda", 0)
    reference = decompressed_llama(config, model, dev)
    ids = torch.tensor([[1, 5, 9, 33, 96, 0, 42, 17]], device=dev)
    # The reference is captured too: a captured forward may pick other kernels than an eager one (the logits then
    # differ in the last bits), so graph is compared with graph.
    with torch.no_grad():
        ref_graph, want = _capture(lambda i: reference(i, use_cache=False).logits, ids)
    ref_graph.replay()
    torch.cuda.synchronize()
    d = Daemon(bins, model["epk"], budget_mb=64, cpu=False)
    try:
        with epk.Client(d.socket) as c:
            m = build_llama(config).to(dev)
            att = epk_torch.attach(m, c, MODEL, layout="dense:bf16", decode="client", static=True)
            with torch.no_grad():
                graph, out = _capture(lambda i: m(i, use_cache=False).logits, ids)
            att.client_decode.buffer.zero_()
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, want)
            del graph, ref_graph
            att.close()
    finally:
        d.close()
