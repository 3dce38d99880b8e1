"""epk-calibrate's parts that need no torch (the accumulator, the checkpoint name mapping, the safetensors writer),
the C++ reader accepting what the writer writes (`epk compress --calibration`, when the epk binary is built), and the
torch hooks (when torch is installed)."""

import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

import epk_testdata
from epk._calibration import (HessianAccumulator, checkpoint_key, checkpoint_tensors, is_embedding, masked_rows,
                              statistics_tensors, why_not_encoded)
from epk._safetensors import read_header, write_safetensors

REPO = Path(__file__).resolve().parents[3]


def read_plain(path):
    """{name: array} of a safetensors file, read with struct, json and NumPy alone (independent of the writer)."""
    dt = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4", "F16": "<f2", "U8": "u1", "U16": "<u2"}
    data = Path(path).read_bytes()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", None)
    out = {}
    end = 0
    for name, e in header.items():
        a, b = e["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=dt[e["dtype"]]).reshape(e["shape"])
        end = max(end, b)
    assert 8 + n + end == len(data), "bytes after the last tensor"
    return out, meta, header


def test_hessian_is_xtx_over_batches_odd_sizes():
    rng = np.random.default_rng(3)
    cols = 37
    batches = [rng.standard_normal((3, 11, cols)).astype(np.float32) for _ in range(3)]
    acc = HessianAccumulator(cols)
    for x in batches:
        acc.add(x)
    x = np.concatenate([b.reshape(-1, cols) for b in batches]).astype(np.float64)
    assert acc.tokens == 3 * 3 * 11
    np.testing.assert_allclose(acc.hessian(), x.T @ x, rtol=1e-5, atol=1e-4)
    h = acc.hessian()
    assert h.dtype == np.float32 and h.shape == (cols, cols)
    assert np.array_equal(h, h.T)


def test_inputs_are_summed_in_f32():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 9)).astype(np.float16)
    acc = HessianAccumulator(9)
    acc.add(x)
    r = x.reshape(-1, 9).astype(np.float32)
    np.testing.assert_allclose(acc.hessian(), r.T @ r, rtol=1e-6, atol=1e-6)


def test_mask_excludes_padded_tokens():
    rng = np.random.default_rng(5)
    cols = 13
    x = rng.standard_normal((2, 7, cols)).astype(np.float32)
    mask = np.ones((2, 7), dtype=bool)
    mask[1, 4:] = False  # the second sequence ends after 4 tokens
    x[1, 4:] = 1e6       # padding's activations must not reach H
    acc = HessianAccumulator(cols)
    acc.add(x, mask)
    kept = np.concatenate([x[0], x[1, :4]]).astype(np.float64)
    assert acc.tokens == 11
    np.testing.assert_allclose(acc.hessian(), kept.T @ kept, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="mask of 7 entries for 14 rows"):
        masked_rows(x, mask[0], cols)


def test_statistics_refuse_empty_and_non_finite():
    acc = HessianAccumulator(4)
    with pytest.raises(ValueError, match="'w.weight': no calibration token"):
        statistics_tensors({"w.weight": acc})
    acc.add(np.full((1, 4), 1e30, np.float32))
    with pytest.raises(ValueError, match="'w.weight': H has non-finite"):
        statistics_tensors({"w.weight": acc})


def test_writer_round_trips_bit_for_bit(tmp_path):
    rng = np.random.default_rng(6)
    tensors = {
        "a.hessian": rng.standard_normal((5, 5)).astype(np.float32),
        "a.tokens": np.array(123456789012, dtype=np.int64),
        "b.f64": np.array(2.5, dtype=np.float64),
        "big_endian": rng.standard_normal((3, 2)).astype(">f4"),
        "half": rng.standard_normal(7).astype(np.float16),
        "empty": np.zeros((0, 3), np.float32),
        "strided": rng.standard_normal((6, 4)).astype(np.float32)[::2, 1:],
    }
    path = tmp_path / "t.safetensors"
    write_safetensors(path, tensors, {"tool": "test"})
    back, meta, header = read_plain(path)
    assert meta == {"tool": "test"}
    assert list(header) == list(tensors)  # the mapping's order, offsets increasing
    offsets = [header[n]["data_offsets"] for n in header]
    assert offsets[0][0] == 0 and all(offsets[i][1] == offsets[i + 1][0] for i in range(len(offsets) - 1))
    assert (8 + struct.unpack("<Q", path.read_bytes()[:8])[0]) % 8 == 0
    for name, a in tensors.items():
        b = back[name]
        assert b.shape == a.shape, name
        assert b.tobytes() == np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes(), name
    assert header["a.tokens"]["dtype"] == "I64" and header["a.tokens"]["shape"] == []
    assert read_header(path)[0] == header
    assert not (tmp_path / "t.safetensors.tmp").exists()


def test_writer_refuses_dtypes_without_a_name(tmp_path):
    with pytest.raises(ValueError, match="tensor 'c': dtype complex64"):
        write_safetensors(tmp_path / "x.safetensors", {"c": np.zeros(2, np.complex64)})
    assert not list(tmp_path.iterdir())


def test_checkpoint_key_maps_prefixes():
    keys = ["model.layers.0.self_attn.q_proj.weight", "lm_head.weight", "model.embed_tokens.weight"]
    assert checkpoint_key("model.layers.0.self_attn.q_proj.weight", keys) == keys[0]
    # AutoModel strips the base model's prefix; a base checkpoint loaded into a head model gains one.
    assert checkpoint_key("layers.0.self_attn.q_proj.weight", keys) == keys[0]
    assert checkpoint_key("model.model.layers.0.self_attn.q_proj.weight", keys) == keys[0]
    assert checkpoint_key("layers.0.self_attn.k_proj.weight", keys) is None
    # "0.x.weight" must not match "10.x.weight": the match is on whole dotted components.
    assert checkpoint_key("0.x.weight", ["layers.10.x.weight"]) is None
    with pytest.raises(ValueError, match="'x.weight' matches several"):
        checkpoint_key("x.weight", ["a.x.weight", "b.x.weight"])


def test_encoded_tensors_follow_compress():
    assert why_not_encoded("model.layers.0.mlp.up_proj.weight", "BF16", (200, 72), False) is None
    assert why_not_encoded("model.norm.weight", "BF16", (72,), False) == "1-D"
    assert why_not_encoded("x.weight", "I32", (4, 4), False) == "dtype I32"
    assert why_not_encoded("model.embed_tokens.weight", "BF16", (97, 72), False).startswith("embedding")
    assert why_not_encoded("model.embed_tokens.weight", "BF16", (97, 72), True) is None
    assert is_embedding("transformer.wte.weight") and not is_embedding("lm_head.weight")


def test_checkpoint_tensors_read_index_and_single_file(tmp_path):
    epk_testdata.write_llama_bf16(tmp_path / "model.safetensors")
    single = checkpoint_tensors(tmp_path)
    assert single["model.layers.1.mlp.down_proj.weight"] == ("BF16", (epk_testdata.HIDDEN, epk_testdata.INTERMEDIATE))
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    t = epk_testdata.llama_tensors()
    names = list(t)
    half = len(names) // 2
    weight_map = {}
    for shard, part in (("a.safetensors", names[:half]), ("b.safetensors", names[half:])):
        epk_testdata.write_safetensors(sharded / shard, {n: ("F32", t[n].astype(np.float32)) for n in part})
        weight_map.update({n: shard for n in part})
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert {n: s for n, (_, s) in checkpoint_tensors(sharded).items()} == {n: s for n, (_, s) in single.items()}
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no .safetensors file"):
        checkpoint_tensors(empty)


def _epk_binary():
    if "EPK_CLI" in os.environ:
        return Path(os.environ["EPK_CLI"])
    return Path(os.environ.get("EPK_BUILD_DIR", REPO / "build" / "default")) / "tools" / "epk" / "epk"


@pytest.mark.parametrize("dtype", ["BF16", "F32"])
def test_epk_compress_accepts_the_statistics(tmp_path, dtype):
    epk = _epk_binary()
    if not epk.is_file():
        pytest.skip(f"epk not built at {epk} (scripts/build.sh, or set EPK_BUILD_DIR / EPK_CLI)")
    t = epk_testdata.llama_tensors(seed=7, layers=1)
    src = tmp_path / "model.safetensors"
    epk_testdata.write_safetensors(src, {n: (dtype, epk_testdata.bf16_bits(v) if dtype == "BF16" else v.astype(np.float32))
                                         for n, v in t.items()})
    rng = np.random.default_rng(8)
    tensors = checkpoint_tensors(tmp_path)
    calibrated = [n for n, (dt, shape) in tensors.items() if why_not_encoded(n, dt, shape, False) is None]
    layers = {}
    for n in calibrated:
        cols = tensors[n][1][1]
        acc = HessianAccumulator(cols)
        # Correlated inputs with a few large channels, as a layer's activations are; odd token counts.
        mix = rng.standard_normal((cols, cols)).astype(np.float32) / np.sqrt(cols)
        x = rng.standard_normal((3, 19, cols)).astype(np.float32) @ mix
        x[..., :3] *= 20.0
        mask = np.ones((3, 19), bool)
        mask[2, 11:] = False
        acc.add(x, mask)
        layers[n] = acc
    stats = tmp_path / "stats.safetensors"
    write_safetensors(stats, statistics_tensors(layers), {"tool": "test"})
    out = tmp_path / "model.epk"
    # --max-error 0.9: the tiny matrices would otherwise be stored raw at the default ceiling (conftest.py's model).
    r = subprocess.run([str(epk), "compress", str(src), "-o", str(out), "--bpp", "4", "--calibration", str(stats),
                        "--device", "cpu", "--threads", "2", "--max-error", "0.9"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line.strip()}
    for n in calibrated:
        assert "(calibrated)" in rows[n], rows.get(n)
    assert "(calibrated)" not in rows["model.embed_tokens.weight"]
    # The same statistics under a name the checkpoint lacks: the reader names it.
    bad = dict(statistics_tensors({calibrated[0]: layers[calibrated[0]]}))
    bad = {k.replace("q_proj", "qq_proj"): v for k, v in bad.items()}
    write_safetensors(stats, bad)
    r = subprocess.run([str(epk), "compress", str(src), "-o", str(out), "--bpp", "4", "--calibration", str(stats),
                        "--device", "cpu", "--threads", "2"], capture_output=True, text=True)
    assert r.returncode != 0 and "qq_proj" in r.stderr, r.stdout + r.stderr


def test_linear_hooks_match_manual_h_and_checkpoint_names(tmp_path):
    torch = pytest.importorskip("torch")
    from epk.calibrate import LinearHooks

    class Block(torch.nn.Module):
        def __init__(self, d, f):
            super().__init__()
            self.up = torch.nn.Linear(d, f, bias=False)
            self.down = torch.nn.Linear(f, d)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(x)))

    class Tiny(torch.nn.Module):
        def __init__(self, vocab=31, d=24, f=40):
            super().__init__()
            self.embed_tokens = torch.nn.Embedding(vocab, d)
            self.layers = torch.nn.ModuleList([Block(d, f) for _ in range(2)])
            self.norm = torch.nn.LayerNorm(d)

        def forward(self, ids):
            x = self.embed_tokens(ids)
            for b in self.layers:
                x = b(x)
            return self.norm(x)

    class Head(torch.nn.Module):  # the "model." prefix a head model adds around its base model
        def __init__(self):
            super().__init__()
            self.model = Tiny()
            self.lm_head = torch.nn.Linear(24, 31, bias=False)
            self.lm_head.weight = self.model.embed_tokens.weight  # tied

        def forward(self, ids):
            return self.lm_head(self.model(ids))

    torch.manual_seed(0)
    head = Head().eval()
    # The checkpoint as save_pretrained writes it: the tied head is not stored; the base model under "model.".
    sd = {k: v.detach().numpy() for k, v in head.state_dict().items() if k != "lm_head.weight"}
    write_safetensors(tmp_path / "model.safetensors", sd)
    tensors = checkpoint_tensors(tmp_path)
    ids = torch.randint(0, 31, (3, 9))
    mask = torch.ones(3, 9, dtype=torch.bool)
    mask[0, 5:] = False

    # The base model alone (AutoModel strips "model."): its linears map to the "model." keys.
    hooks = LinearHooks(head.model, tensors)
    want_keys = [f"model.layers.{i}.{n}.weight" for i in range(2) for n in ("up", "down")]
    assert list(hooks.layers) == want_keys
    inputs = {}
    caps = [m.register_forward_pre_hook(lambda m, a, n=n: inputs.__setitem__(n, a[0].detach()))
            for n, m in head.model.named_modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        hooks.mask = mask
        head.model(ids)
    for c in caps:
        c.remove()
    for key in want_keys:
        x = inputs[key[len("model."):-len(".weight")]]
        r = x[mask].double()
        np.testing.assert_allclose(hooks.layers[key].hessian(), (r.T @ r).numpy(), rtol=1e-4, atol=1e-4)
        assert hooks.layers[key].tokens == int(mask.sum())
    hooks.close()
    assert not any(m._forward_pre_hooks for m in head.modules())

    # The head model: the tied lm_head is the embedding's, raw unless --include-embeddings.
    hooks = LinearHooks(head, tensors)
    assert "model.embed_tokens.weight" in hooks.skipped and "model.embed_tokens.weight" not in hooks.layers
    hooks.close()
    hooks = LinearHooks(head, tensors, include_embeddings=True)
    assert hooks.layers["model.embed_tokens.weight"].cols == 24
    hooks.close()

    # A linear the checkpoint lacks is named.
    del sd["model.layers.1.down.weight"]
    write_safetensors(tmp_path / "model.safetensors", sd)
    with pytest.raises(ValueError, match="linear 'model.layers.1.down'"):
        LinearHooks(head, checkpoint_tensors(tmp_path))


def test_llama_model_end_to_end(tmp_path):
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from epk.calibrate import LinearHooks, token_sequences
    import torch

    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=101, tie_word_embeddings=False)
    torch.manual_seed(1)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.save_pretrained(tmp_path)
    tensors = checkpoint_tensors(tmp_path)
    base = transformers.AutoModel.from_pretrained(tmp_path).eval()
    hooks = LinearHooks(base, tensors)
    assert "model.layers.0.self_attn.q_proj.weight" in hooks.layers
    assert all(k in tensors for k in hooks.layers)
    seqs = token_sequences(list(range(1, 60)), samples=4, seq=16, pad_id=0)
    assert len(seqs) == 4 and seqs[3][1].sum() == 59 - 48
    ids = torch.from_numpy(np.stack([i for i, _ in seqs]))
    mask = torch.from_numpy(np.stack([m for _, m in seqs]))
    with torch.no_grad():
        hooks.mask = mask
        base(input_ids=ids, attention_mask=mask.long(), use_cache=False)
    stats = hooks.statistics()
    hooks.close()
    assert int(stats["model.layers.0.self_attn.q_proj.weight.tokens"]) == int(mask.sum())


def test_the_model_loads_as_the_class_it_was_saved_from(tmp_path):
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from epk.calibrate import LinearHooks, _load

    # A BERT encoder: AutoModelForCausalLM would make it a BertLMHeadModel with a transform linear the checkpoint
    # lacks (LinearHooks would then refuse it); loaded as BertModel, every linear is the checkpoint's.
    cfg = transformers.BertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                  vocab_size=50, max_position_embeddings=64)
    transformers.BertModel(cfg).save_pretrained(tmp_path / "bert")
    bert = _load(str(tmp_path / "bert"), "cpu", lambda s: None)
    assert type(bert).__name__ == "BertModel"
    hooks = LinearHooks(bert, checkpoint_tensors(tmp_path / "bert"))
    assert "encoder.layer.0.attention.self.query.weight" in hooks.layers
    hooks.close()
    llama = transformers.LlamaConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
                                     num_key_value_heads=1, vocab_size=50)
    transformers.LlamaForCausalLM(llama).save_pretrained(tmp_path / "llama")
    assert type(_load(str(tmp_path / "llama"), "cpu", lambda s: None)).__name__ == "LlamaForCausalLM"


def _tiny_llama_folder(path, layers=3):
    """A small Llama checkpoint with a word-level tokenizer of its own (no download)."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    import torch

    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=101,
                                   tie_word_embeddings=False)
    torch.manual_seed(3)
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    vocab = {"<unk>": 0, **{f"w{i}": i for i in range(1, 101)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<unk>").save_pretrained(
        path)
    return " ".join(f"w{(i * 37) % 100 + 1}" for i in range(90))


def test_a_model_over_the_memory_budget_is_calibrated_block_by_block(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("accelerate")
    import io
    from epk.calibrate import calibrate, checkpoint_bytes

    text = _tiny_llama_folder(tmp_path / "m")
    whole = calibrate(str(tmp_path / "m"), str(tmp_path / "whole.safetensors"), text, samples=3, seq=32, batch=2,
                      device="cpu", err=io.StringIO())
    log = io.StringIO()
    budget = checkpoint_bytes(str(tmp_path / "m")) // 4  # most blocks to disk
    blocks = calibrate(str(tmp_path / "m"), str(tmp_path / "blocks.safetensors"), text, samples=3, seq=32,
                       batch=2, device="cpu", err=log, max_memory=budget)
    assert "block by block" in log.getvalue()
    assert list(blocks) == list(whole) and len(whole) == 2 * (3 * 7 + 1)  # 7 linears a block and the head
    for name, h in whole.items():
        np.testing.assert_array_equal(blocks[name], h, err_msg=name)  # the same float operations, block by block
    import re
    offload = re.search(r"in (\S*epk-calibrate-offload-\S*?)\)", log.getvalue())
    assert offload and not os.path.exists(offload.group(1))  # the offload folder went

