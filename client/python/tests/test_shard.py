"""Tensor-parallel shards through the epk package against a real `epkd --cpu`: every shard (rows and columns, every
rank of worlds 1..5, single rows and columns, ranges starting mid-tile) of every layout equals the same slice of the
whole lease, bit for bit; the budget counts the shard's bytes; shards are cache entries of their own; bad shards
are epk.InvalidArgument (a ValueError) naming tensor, shape and range; prefetch takes a shard."""

import numpy as np
import pytest

import epk

MODEL = "test"
LAYOUTS = ("dense:bf16", "dense:fp16", "dense:fp32", "rowwise:int8", "rowwise:fp8_e4m3")


@pytest.fixture
def client(daemon):
    with epk.Client(daemon.socket) as c:
        yield c


def view(lease):
    """The lease as a NumPy array (bf16 and fp8 as their bits), copied out of the slot."""
    if lease.layout in ("dense:fp16", "dense:fp32", "rowwise:int8"):
        return np.array(np.from_dlpack(lease))
    return np.array(np.from_dlpack(lease.bits_view()))


def ceil_split(extent, rank, world):
    """torch.chunk's rule as its documentation states it: chunks of ceil(extent / world), the last smaller."""
    chunk = -(-extent // world)
    return rank * chunk, min(extent, (rank + 1) * chunk)


def shards_of(extent, dim):
    out = []
    for world in range(1, 6):
        for rank in range(world):
            b, e = ceil_split(extent, rank, world)
            out.append((epk.Shard.split(dim, rank, world), (b, e)))
    make = epk.Shard.rows if dim == "rows" else epk.Shard.cols
    for b, e in ((0, 1), (extent - 1, extent), (3, extent - 2), (5, 9)):
        if 0 <= b < e <= extent:
            out.append((make(b, e), (b, e)))
    return out


def test_shard_resolution_follows_the_ceil_rule():
    for extent in range(1, 40):
        for world in range(1, 7):
            for rank in range(world):
                b, e = ceil_split(extent, rank, world)
                s = epk.Shard.split("cols", rank, world)
                if b >= e:
                    with pytest.raises(epk.InvalidArgument, match="share is empty"):
                        s.resolve([3, extent])
                else:
                    assert s.resolve([3, extent]) == (1, b, e)
    with pytest.raises(epk.InvalidArgument):
        epk.Shard.split("depth", 0, 2)
    assert epk.Shard.rows(1, 4) == epk.Shard.rows(1, 4) and epk.Shard.rows(1, 4) != epk.Shard.cols(1, 4)
    assert "rows [1, 4)" in repr(epk.Shard.rows(1, 4))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_shard_is_the_slice_of_the_whole_lease(client, model, layout):
    checked = 0
    for name in model["lattice"]:
        with client.acquire(MODEL, name, layout) as whole:
            full = view(whole)
            scales = np.array(np.from_dlpack(whole.row_scales)) if whole.row_scales is not None else None
        for axis, dim in ((0, "rows"), (1, "cols")):
            for shard, (b, e) in shards_of(full.shape[axis], dim):
                if b >= e:
                    with pytest.raises(epk.InvalidArgument):
                        client.acquire(MODEL, name, layout, shard=shard)
                    continue
                with client.acquire(MODEL, name, layout, shard=shard) as lease:
                    got = view(lease)
                    want = full[b:e] if axis == 0 else full[:, b:e]
                    assert got.shape == want.shape and got.dtype == want.dtype, (name, shard)
                    assert np.array_equal(got, want), f"{name} {layout} {shard} differs from the whole's slice"
                    if scales is not None:
                        got_scales = np.from_dlpack(lease.row_scales).view(np.uint32)
                        want_scales = (scales[b:e] if axis == 0 else scales).view(np.uint32)
                        assert np.array_equal(got_scales, want_scales), (name, shard)
                checked += 1
    assert checked > 100


def test_raw_tensors_shard_too(client, model):
    for name, (dtype, shape, raw) in model["source"].items():
        if name in model["lattice"]:
            continue
        with client.acquire(MODEL, name, "dense:fp32") as whole:
            full = view(whole)
        for shard, (b, e) in shards_of(shape[0], "rows")[:6]:
            with client.acquire(MODEL, name, "dense:fp32", shard=shard) as lease:
                assert np.array_equal(view(lease).view(np.uint32), full[b:e].view(np.uint32)), (name, shard)


def test_the_budget_counts_the_shards_bytes(client, model):
    name = model["lattice"][0]
    with client.acquire(MODEL, name, "dense:fp32") as whole:
        rows, cols = whole.shape
    used0 = client.stats()["used_bytes"]
    shard = epk.Shard.split("rows", 1, 2)
    b, e = ceil_split(rows, 1, 2)
    with client.acquire(MODEL, name, "dense:bf16", shard=shard) as lease:
        assert lease.nbytes == (e - b) * cols * 2
        s = client.stats()
        assert s["slots"] == 2  # the whole fp32 slot (released, cached) and the shard
        assert s["pinned_bytes"] >= lease.nbytes and s["pinned_bytes"] < rows * cols * 2
        assert s["used_bytes"] - used0 >= lease.nbytes
        assert s["pools"][0]["used_bytes"] == s["used_bytes"]


def test_shards_are_cache_entries_of_their_own(client, model):
    name = model["lattice"][1]
    a = client.acquire(MODEL, name, "dense:bf16", shard=epk.Shard.split("cols", 0, 2))
    b = client.acquire(MODEL, name, "dense:bf16", shard=epk.Shard.split("cols", 1, 2))
    w = client.acquire(MODEL, name, "dense:bf16")
    assert len({a.data_ptr, b.data_ptr, w.data_ptr}) == 3
    s = client.stats()
    assert s["slots"] == 3 and s["misses"] == 3
    _, lo, hi = epk.Shard.split("cols", 0, 2).resolve(w.shape)
    again = client.acquire(MODEL, name, "dense:bf16", shard=epk.Shard.cols(lo, hi))  # the same range, spelled out
    assert again.data_ptr == a.data_ptr and client.stats()["hits"] == 1
    for lease in (a, b, w, again):
        lease.release()


def test_bad_shards_are_invalid_argument_and_the_client_goes_on(client, model):
    name = model["lattice"][0]
    with client.acquire(MODEL, name, "dense:bf16") as whole:
        rows, cols = whole.shape
    with pytest.raises(epk.InvalidArgument) as e:
        client.acquire(MODEL, name, "dense:bf16", shard=epk.Shard.rows(0, rows + 1))
    msg = str(e.value)
    assert f"'{name}' of shape [{rows}, {cols}]" in msg and f"rows [0, {rows + 1})" in msg, msg
    assert isinstance(e.value, ValueError)
    with pytest.raises(epk.InvalidArgument, match="rank 2 is not below world size 2"):
        client.acquire(MODEL, name, "dense:bf16", shard=epk.Shard.split("cols", 2, 2))
    with client.acquire(MODEL, name, "dense:bf16", shard=epk.Shard.cols(cols - 1, cols)) as lease:
        assert lease.shape == (rows, 1)


def test_prefetch_takes_a_shard(client, model):
    names = model["lattice"][:3]
    shard = epk.Shard.split("rows", 0, 3)
    assert client.prefetch(MODEL, names, "dense:bf16", shard=shard) == 3
    rows = {t["name"]: t["shape"][0] for t in client.tensors(MODEL)}
    with client.acquire(MODEL, names[2], "dense:bf16", shard=shard) as lease:
        assert lease.shape[0] == ceil_split(rows[names[2]], 0, 3)[1]
    s = client.stats()
    assert s["slots"] == 3 and s["prefetches"] == 3
