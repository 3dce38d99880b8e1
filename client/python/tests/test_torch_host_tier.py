"""Client-side decode from a host tier (epkd with --tier-budget-mb 0 keeps the tier in its host tier, a sealed memfd
the client maps read-only): decodes that read it in place and staged ones give epkd's bytes, and a model whose
GPU limit keeps only part of the tier on the GPU (the rest copied over PCIe before each decode) gives the decompressed
model's logits bit for bit. Skipped without torch, a GPU or client-side decode; scripts/gpu/python_run.sh runs them."""

import numpy as np
import pytest

import epk

torch = pytest.importorskip("torch")
import epk.stored  # noqa: E402
import epk.torch as epk_torch  # noqa: E402
from conftest import Daemon  # noqa: E402
from torch_helpers import (MODEL, UP, as_bits, build_llama, decompressed_llama, llama_config,  # noqa: E402
                           needs_client_decode, needs_cuda)

IDS = [[1, 5, 9, 33, 96, 0, 42, 17]]


def host_daemon(bins, model):
    return Daemon(bins, model["epk"], budget_mb=64, cpu=False, args=["--tier-budget-mb", "0"])


@needs_cuda
def test_in_place_and_staged_decodes_give_epkds_bytes(bins, model):
    needs_client_decode()
    dev = torch.device("cuda", 0)
    d = host_daemon(bins, model)
    try:
        with epk.Client(d.socket) as c:
            tier = epk.stored.StoredTier(c, MODEL, 0)
            assert tier.host_tier and tier.tier_bytes > 0
            names = [UP, "model.layers.1.self_attn.k_proj.weight"]
            spans = [tier.span(n) for n in names]
            assert all(off % 256 == 0 and n > 0 for off, n in spans)
            staging = torch.empty(sum((n + 255) // 256 * 256 for _, n in spans), dtype=torch.uint8, device=dev)
            stream = torch.cuda.current_stream(dev)
            for layout in ("dense:bf16", "rowwise:int8"):
                for staged in (False, True):
                    outs = [torch.full((tier.decoded_bytes(n, layout),), 0xA5, dtype=torch.uint8, device=dev)
                            for n in names]
                    jobs, at = [], staging.data_ptr()
                    for n, o, (_, nbytes) in zip(names, outs, spans):
                        jobs.append((n, layout, o.data_ptr(), at) if staged else (n, layout, o.data_ptr()))
                        at += (nbytes + 255) // 256 * 256
                    batch = tier.plan(jobs)
                    staging.fill_(0x5A)  # a decode that read stale staging bytes would differ
                    batch.enqueue_copy(stream.cuda_stream)
                    batch.enqueue(stream.cuda_stream)
                    batch.check(stream.cuda_stream)
                    for n, o in zip(names, outs):
                        with c.acquire(MODEL, n, layout) as lease:  # epkd decodes it from its host tier
                            values = as_bits(torch.from_dlpack(lease)).reshape(-1)
                        assert np.array_equal(o.cpu()[:values.size].numpy(), values), f"{n} {layout} {staged}"
                    batch.close()
            with pytest.raises(epk.InvalidArgument, match="256-byte aligned"):
                tier.plan([(UP, "dense:bf16", staging.data_ptr(), staging.data_ptr() + 16)])
            tier.close()
    finally:
        d.close()


@needs_cuda
def test_a_gpu_limit_streams_part_of_the_tier_and_the_logits_stay_exact(bins, model):
    needs_client_decode()
    config = llama_config()
    dev = torch.device("cuda", 0)
    ids = torch.tensor(IDS, device=dev)
    with torch.no_grad():
        want = decompressed_llama(config, model, dev)(ids).logits
    d = host_daemon(bins, model)
    try:
        with epk.Client(d.socket) as c:
            # No limit: the whole tier is copied to the GPU once.
            m = build_llama(config).to(dev)
            att = epk_torch.attach(m, c, MODEL, layout="dense:bf16", decode="client", prefetch=1)
            whole = att.memory()
            assert whole["host_tier"] and whole["streamed_tier_bytes"] == 0 and whole["resident_tier_bytes"] > 0
            with torch.no_grad():
                assert torch.equal(m(ids).logits, want)
            att.close()
            # A limit below the whole tier: units stream through the staging ring. The largest such limit that
            # streams (the test model's three units are uneven: a limit just below the tier may not fit a ring).
            loaded = mem = None
            for k in range(1, 40):
                limit = whole["decode_buffer_bytes"] + whole["resident_buffer_bytes"] * (40 - k) // 40
                try:
                    loaded = epk_torch.load(config, c, MODEL, layout="dense:bf16", decode="client", prefetch=None,
                                            max_gpu_gb=limit / 2**30)
                except epk.NoSpace:
                    continue
                mem = loaded._epk_attachment.memory()
                if mem["streamed_tier_bytes"] > 0:
                    break
                loaded._epk_attachment.close()
                loaded = None
            assert loaded is not None, "no limit below the whole tier streamed a unit"
            assert mem["staging_slots"] in (1, 2) and mem["streamed_tier_bytes"] > 0
            assert mem["decode_buffer_bytes"] + mem["resident_buffer_bytes"] + mem["staging_bytes"] <= limit
            with torch.no_grad():
                for _ in range(3):
                    assert torch.equal(loaded(ids).logits, want)
            loaded._epk_attachment.close()
            # Below the decode buffer nothing can be served, and the error says what the limit must hold.
            with pytest.raises(epk.NoSpace, match="max_gpu_gb"):
                epk_torch.attach(build_llama(config).to(dev), c, MODEL, decode="client",
                                 max_gpu_gb=whole["decode_buffer_bytes"] / 2 / 2**30)
    finally:
        d.close()
