"""The epk package against a real `epkd --cpu` (host memfd pools, the CPU decoder): what np.from_dlpack sees of a
lease is what `epk decompress` writes, bit for bit; leases, context managers, prefetch, stats; every error class."""

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import epk
import epk_testdata
from conftest import DECOMPRESS_ARGS, REPO, Daemon, run, wait_until

MODEL = "test"
UP = "model.layers.0.mlp.up_proj.weight"
NORM = "model.layers.0.input_layernorm.weight"


def lattice_names(model):
    return model["lattice"]


def pins(socket):
    with epk.Client(socket) as c:
        return c.stats()["pins"]


@pytest.fixture
def client(daemon):
    with epk.Client(daemon.socket) as c:
        yield c


# ---- what a lease holds


@pytest.mark.parametrize("layout", list(DECOMPRESS_ARGS))
def test_lease_equals_decompress_output(client, model, layout):
    ref = model["ref"][layout]
    names = lattice_names(model)
    assert len(names) == 15
    for name in names:
        with client.acquire(MODEL, name, layout) as lease:
            assert lease.layout == layout and lease.model == MODEL and lease.tensor == name
            assert not lease.on_device and lease.device == -1
            assert epk.Lease.__dlpack_device__(lease) == (1, 0)
            want = epk_testdata.as_array(ref[name])
            if layout in ("dense:fp16", "dense:fp32", "rowwise:int8"):
                got = np.from_dlpack(lease)
            else:  # NumPy has no bf16 or fp8: the same bits as unsigned integers
                got = np.from_dlpack(lease.bits_view())
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.ctypes.data == lease.data_ptr, "np.from_dlpack copied"
            assert np.array_equal(got, want), f"{name} ({layout}) differs from epk decompress"
            if layout.startswith("rowwise:"):
                scales = np.from_dlpack(lease.row_scales)
                want_scales = epk_testdata.as_array(ref[name + ".row_scales"])
                assert scales.dtype == np.float32 and scales.shape == (want.shape[0],)
                assert np.array_equal(scales.view(np.uint32), want_scales.view(np.uint32))
            else:
                assert lease.row_scales is None
            assert lease.parts == {}


def test_raw_tensors_pass_through(client, model):
    # Raw tensors (norms, embeddings) in their stored dtype are the source bytes; fp32 is the exact widening of bf16.
    for name, (dtype, shape, raw) in model["source"].items():
        if name in lattice_names(model):
            continue
        with client.acquire(MODEL, name, "dense:bf16") as lease:
            assert np.array_equal(np.from_dlpack(lease.bits_view()), np.frombuffer(raw, np.uint16).reshape(shape))
        with client.acquire(MODEL, name, "dense:fp32") as lease:
            widened = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).reshape(shape)
            assert np.array_equal(np.from_dlpack(lease).view(np.uint32), widened)


def test_host_arrays_are_read_only(client):
    with client.acquire(MODEL, UP, "dense:fp32") as lease:
        a = np.from_dlpack(lease)  # NumPy 2.1+ asks for a DLPack 1.x capsule, which carries the read-only flag
        if tuple(int(x) for x in np.__version__.split(".")[:2]) >= (2, 1):
            assert not a.flags.writeable
        cap = lease.__dlpack__(max_version=(1, 0))
        assert "dltensor_versioned" in repr(cap)
        assert "dltensor" in repr(lease.__dlpack__())


def test_dlpack_arguments(client):
    with client.acquire(MODEL, UP, "dense:fp32") as lease:
        lease.__dlpack__(stream=None)
        lease.__dlpack__(stream=-1)
        with pytest.raises(epk.InvalidArgument):
            lease.__dlpack__(stream=7)  # a host lease has no stream
        with pytest.raises(BufferError):
            lease.__dlpack__(copy=True)
        with pytest.raises(BufferError):
            lease.__dlpack__(dl_device=(2, 0))
        lease.__dlpack__(dl_device=(1, 0), copy=False)


# ---- lifetimes


def test_release_and_context_managers(daemon, client):
    lease = client.acquire(MODEL, UP, "dense:fp32")
    assert not lease.released and client.stats()["pins"] == 1
    lease.release()
    assert lease.released and client.stats()["pins"] == 0
    lease.release()  # idempotent
    with pytest.raises(epk.Released):
        lease.__dlpack__()
    with client.acquire(MODEL, UP, "dense:fp32") as l2:
        assert client.stats()["pins"] == 1
    assert l2.released and client.stats()["pins"] == 0
    with epk.Client(daemon.socket) as c2:
        l3 = c2.acquire(MODEL, UP, "dense:fp32")
        a = np.from_dlpack(l3)
        snapshot = a.copy()
        assert client.stats()["pins"] == 1
    assert l3.released and not c2.connected
    # close() does not wait for epkd: the closed session's pins go once epkd has seen the socket close.
    wait_until(lambda: client.stats()["pins"] == 0, "the closed client's pins to go")
    # The mapping outlives close(): the array still points at mapped memory (released: its bytes may change later).
    assert a.shape == snapshot.shape and np.isfinite(a).all()
    with pytest.raises(epk.Closed):
        c2.stats()
    del a, l3
    gc.collect()


def test_collected_lease_is_released(client):
    a = np.from_dlpack(client.acquire(MODEL, UP, "dense:fp32"))
    gc.collect()
    assert client.stats()["pins"] == 1, "the array must keep its lease (and the pin)"
    del a
    gc.collect()
    wait_until(lambda: client.stats()["pins"] == 0, "the collected lease's release")
    client.acquire(MODEL, UP, "dense:fp32")  # dropped at once
    wait_until(lambda: client.stats()["pins"] == 0, "the dropped lease's release")


def test_prefetch_stats_models_pools(client, model):
    names = lattice_names(model)
    s0 = client.stats()
    assert s0["budget_bytes"] == 16 << 20 and s0["clients"] >= 1 and s0["models"] == 1
    assert s0["pools"][0]["device"] == -1
    queued = client.prefetch(MODEL, names, "dense:fp16")
    assert queued == len(names)
    wait_until(lambda: client.stats()["decodes"] >= s0["decodes"] + len(names), "the prefetched decodes")
    assert client.prefetch(MODEL, names, "dense:fp16") == 0  # cached now
    hits = client.stats()["hits"]
    for n in names:
        client.acquire(MODEL, n, "dense:fp16").release()
    assert client.stats()["hits"] == hits + len(names)
    assert client.stats()["prefetches"] >= 2
    s1 = client.stats()
    assert s1["space_waits"] == 0 and s1["prefetches_dropped"] == 0  # the budget held every prefetch
    assert s1["pools"][0]["prefetched_bytes"] == 0  # every prefetched slot was then acquired
    assert s1["pools"][0]["fenced_bytes"] == 0
    tensors = client.tensors(MODEL)
    assert sorted(t["name"] for t in tensors) == sorted(model["source"])
    for t in tensors:
        dtype, shape, raw = model["source"][t["name"]]
        assert t["shape"] == tuple(shape) and t["dtype"] == dtype, t
        assert t["encoding"] == ("lattice-rans" if t["name"] in names else "raw"), t
        assert t["stored_bytes"] > 0
    with pytest.raises(epk.NotFound):
        client.tensors("no-such-model")
    models = client.models()
    assert [m["name"] for m in models] == [MODEL]
    assert models[0]["tensors"] == len(model["source"]) and models[0]["cached_slots"] >= len(names)
    pools = client.pools()
    assert len(pools) == 1 and pools[0]["kind"] == "host" and pools[0]["size"] >= 16 << 20
    assert client.prefetch(MODEL, [], "dense:fp16") == 0


def test_one_client_many_threads(client, model):
    names = lattice_names(model)
    ref = model["ref"]["dense:fp32"]
    errors = []

    def work():
        try:
            for _ in range(5):
                for n in names:
                    with client.acquire(MODEL, n, "dense:fp32") as lease:
                        if not np.array_equal(np.from_dlpack(lease), epk_testdata.as_array(ref[n])):
                            errors.append(n)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert client.stats()["pins"] == 0


# ---- errors


def test_not_found(client):
    with pytest.raises(epk.NotFound) as e:
        client.acquire("no-such-model", UP)
    assert "no-such-model" in str(e.value) and e.value.code == "not-found"
    with pytest.raises(epk.NotFound) as e:
        client.acquire(MODEL, "model.layers.9.nothing.weight")
    assert "model.layers.9.nothing.weight" in str(e.value)
    with pytest.raises(epk.NotFound):
        client.acquire(MODEL, UP, "dense:fp32", device=1)  # a host daemon serves device 0 only
    with pytest.raises(epk.NotFound):
        client.prefetch("no-such-model", [UP])
    assert isinstance(e.value, LookupError) and isinstance(e.value, epk.Error)
    assert client.stats()["pins"] == 0  # the connection survives a failed request


def test_layout_the_tensor_cannot_serve(client):
    with pytest.raises(epk.Unsupported) as e:
        client.acquire(MODEL, NORM, "rowwise:int8")  # a raw 1-D norm
    assert NORM in str(e.value) and "rowwise:int8" in str(e.value)
    with pytest.raises(epk.Unsupported) as e:
        client.acquire(MODEL, UP, "gptq")  # packed integer layouts need an intq tensor
    assert "gptq" in str(e.value)
    with pytest.raises(epk.InvalidArgument) as e:
        client.acquire(MODEL, UP, "dense:int3")
    assert "dense:int3" in str(e.value) and isinstance(e.value, ValueError)
    with client.acquire(MODEL, UP, "stored") as lease:  # still connected
        assert lease.dtype == "BF16"


def test_no_space(bins, model):
    d = Daemon(bins, model["epk"], budget_mb=1)
    try:
        with epk.Client(d.socket) as c:
            held = []
            with pytest.raises(epk.NoSpace) as e:
                for _ in range(2):
                    for n in lattice_names(model):
                        held.append(c.acquire(MODEL, n, "dense:fp32"))
                        held.append(c.acquire(MODEL, n, "dense:fp16"))
                        held.append(c.acquire(MODEL, n, "dense:bf16"))
                        held.append(c.acquire(MODEL, n, "rowwise:int8"))
                        held.append(c.acquire(MODEL, n, "rowwise:fp8_e4m3"))
            assert e.value.code == "no-space"
            assert c.stats()["pins"] == len(held)
            for lease in held:
                lease.release()
            assert c.stats()["pins"] == 0
            c.acquire(MODEL, UP, "dense:fp32").release()  # room again
    finally:
        d.close()


def test_quota_and_access_errors(bins, model):
    d = Daemon(bins, model["epk"], args=["--max-pins-per-tensor", "2", "--max-sessions-per-uid", "2"])
    try:
        with epk.Client(d.socket) as c:
            first, second = c.acquire(MODEL, UP, "dense:fp32"), c.acquire(MODEL, UP, "dense:fp32")
            with pytest.raises(epk.QuotaExceeded) as e:
                c.acquire(MODEL, UP, "dense:fp32")
            assert isinstance(e.value, epk.NoSpace) and e.value.code == "over-quota"
            assert "max_pins_per_tensor" in str(e.value)
            first.release()
            second.release()
            # The daemon admits max_sessions_per_uid (2) sessions of one uid: c and this one; a third is refused.
            with epk.Client(d.socket):
                with pytest.raises(epk.PermissionDenied) as e:
                    epk.Client(d.socket)
                assert e.value.code == "permission" and "max_sessions_per_uid" in str(e.value)
                assert isinstance(e.value, PermissionError)
    finally:
        d.close()


def test_decode_error(bins, model, tmp_path):
    # One byte of q_proj's rANS payload flipped: the container's per-buffer checksum or the tile check catches it.
    info = json.loads(run([bins["epk"], "inspect", "--json", model["epk"]]).stdout)
    entry = next(t for t in info["tensors"] if t["name"] == "model.layers.0.self_attn.q_proj.weight")
    payload = next(b for b in entry["buffers"] if b["name"] == "payload")
    data = bytearray(model["epk"].read_bytes())
    data[payload["offset"] + payload["size"] // 2] ^= 0x10
    bad = tmp_path / "bad.epk"
    bad.write_bytes(bytes(data))
    d = Daemon(bins, bad)
    try:
        with epk.Client(d.socket) as c:
            with pytest.raises(epk.DecodeError) as e:
                c.acquire(MODEL, entry["name"], "dense:fp32")
            assert entry["name"] in str(e.value)
            c.acquire(MODEL, UP, "dense:fp32").release()  # the other tensors still serve
            assert c.stats()["pins"] == 0
    finally:
        d.close()


def test_dead_daemon(daemon):
    with pytest.raises(epk.Unavailable) as e:
        epk.Client(os.path.join(daemon.dir, "nobody.sock"))
    assert "nobody.sock" in str(e.value) and isinstance(e.value, ConnectionError)
    c = epk.Client(daemon.socket)
    lease = c.acquire(MODEL, UP, "dense:fp32")
    daemon.stop(signal.SIGKILL)
    with pytest.raises(epk.ConnectionLost):
        c.acquire(MODEL, UP, "dense:fp32")
    assert not c.connected
    with pytest.raises(epk.ConnectionLost):
        c.stats()  # the connection stays lost
    lease.release()  # the pins went with the connection: nothing to do, no error
    c.close()
    with pytest.raises(epk.Unavailable):
        epk.Client(daemon.socket)


def test_daemon_restarted_under_a_live_client(daemon, model):
    c = epk.Client(daemon.socket)
    lease = c.acquire(MODEL, UP, "dense:fp32")
    before = np.from_dlpack(lease).copy()
    daemon.stop()
    daemon.start()
    with pytest.raises(epk.ConnectionLost) as e:
        c.acquire(MODEL, UP, "dense:fp32")
    assert isinstance(e.value, ConnectionError)
    with pytest.raises(epk.ConnectionLost):
        c.prefetch(MODEL, [UP])
    lease.release()
    c.close()
    with epk.Client(daemon.socket) as c2:
        with c2.acquire(MODEL, UP, "dense:fp32") as l2:
            assert np.array_equal(np.from_dlpack(l2), before)
        assert c2.stats()["pins"] == 0 and c2.stats()["clients"] == 1


def test_killed_client_loses_its_pins(daemon, model):
    names = lattice_names(model)[:3]
    child = textwrap.dedent(f"""
        import sys, time, epk
        c = epk.Client({daemon.socket!r})
        held = [c.acquire({MODEL!r}, n, "dense:fp32") for n in {names!r}]
        print("ready", flush=True)
        time.sleep(60)
    """)
    p = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        with epk.Client(daemon.socket) as c:
            assert c.stats()["pins"] == len(names)
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)
            wait_until(lambda: c.stats()["pins"] == 0, "the killed client's pins to go")
            wait_until(lambda: c.stats()["clients"] == 1, "the killed client's session to end")
            assert c.stats()["pinned_bytes"] == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_default_socket(daemon, monkeypatch):
    monkeypatch.setenv("EPK_SOCKET", daemon.socket)
    with epk.Client() as c:
        assert c.socket == daemon.socket and c.stats()["pins"] == 0
    monkeypatch.delenv("EPK_SOCKET")
    assert epk.DEFAULT_SOCKET == "/run/epkd/epkd.sock"
    if not os.path.exists(epk.DEFAULT_SOCKET):
        with pytest.raises(epk.Unavailable) as e:
            epk.Client()
        assert epk.DEFAULT_SOCKET in str(e.value)


# ---- packed integer layouts


@pytest.fixture(scope="module")
def intq_model(bins, tmp_path_factory):
    """An imported GPTQ checkpoint (one 4-bit asymmetric layer, from the repository's layout vectors) and
    `epk convert`'s output for each packed layout it can take (gptq, gptq-v2, awq; marlin is symmetric only)."""
    d = tmp_path_factory.mktemp("intq")
    src = epk_testdata.read_safetensors(REPO / "tests" / "data" / "layouts" / "gptq_4bit_v1_asym.safetensors")
    ckpt = d / "ckpt"
    ckpt.mkdir()
    epk_testdata.write_safetensors(ckpt / "model.safetensors", {
        "proj." + k: (src[k][0], epk_testdata.as_array(src[k])) for k in ("qweight", "qzeros", "scales", "g_idx")})
    (ckpt / "config.json").write_text(json.dumps({"quantization_config": {
        "quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": False, "sym": False,
        "checkpoint_format": "gptq"}}))
    run([bins["epk"], "import", ckpt, "-o", d / "q.epk"])
    ref = {}
    for layout in ("gptq", "gptq-v2", "awq"):
        run([bins["epk"], "convert", d / "q.epk", "--to", layout, "-o", d / f"{layout}.safetensors"])
        ref[layout] = epk_testdata.read_safetensors(d / f"{layout}.safetensors")
    return {"epk": d / "q.epk", "ref": ref}


def test_packed_layouts_give_their_parts(bins, model, intq_model):
    d = Daemon(bins, model["epk"], extra=[f"q={intq_model['epk']}"])
    try:
        with epk.Client(d.socket) as c:
            for layout, ref in intq_model["ref"].items():
                with c.acquire("q", "proj.weight", layout) as lease:
                    parts = lease.parts
                    assert sorted(parts) == sorted(n[len("proj."):] for n in ref), layout
                    for name, part in parts.items():
                        want = epk_testdata.as_array(ref["proj." + name])
                        got = np.from_dlpack(part)
                        assert part.name == name and got.shape == want.shape and got.dtype == want.dtype
                        assert got.ctypes.data == part.data_ptr
                        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), f"{layout} {name}"
                    with pytest.raises(epk.Unsupported):
                        lease.__dlpack__()  # several arrays: the parts, not the lease
                    del parts, part, got
            with pytest.raises(epk.Unsupported) as e:
                c.acquire("q", "proj.weight", "marlin")  # asymmetric: marlin cannot carry it
            assert "proj.weight" in str(e.value)
            assert c.stats()["pins"] == 0
    finally:
        d.close()
