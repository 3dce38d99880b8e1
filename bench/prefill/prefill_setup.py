"""The prefill benchmark's torch side (bench/prefill/prefill_bench.py): one setup in a process of its own (`setup`,
started by the driver) and the random Llama-3-8B- or 70B-shaped model (`make-model`). torch, transformers and epk are
imported inside the functions, so the driver and its tests need none of them."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from prefill_report import MODEL_NAME, REF_SETUPS, STREAMING_SETUPS, Work, load_json, median, write_json

# Llama-3-8B's shape (issue 14): transformers LlamaConfig fields.
LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
                 rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, tie_word_embeddings=False,
                 bos_token_id=128000, eos_token_id=128001, hidden_act="silu")
# Llama-3-70B's (issue 32): the 8B's but for these.
LLAMA3_70B = LLAMA3_8B | dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64)
SHAPES = {"8b": LLAMA3_8B, "70b": LLAMA3_70B}


# ---------------------------------------------------------------------------------------------------------------------
# One setup, in its own process (torch imported here only)

def _ids(length: int, vocab: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + length)
    return torch.randint(0, vocab, (1, length), generator=g).cuda()


def _logits_hash(t) -> str:
    import torch

    return hashlib.sha256(t.contiguous().view(torch.int16).numpy().tobytes()).hexdigest()


def _compare(got, ref_path: Path) -> dict:
    """got (CPU) against the saved reference: on the CPU, so that the check adds nothing to the GPU's peak."""
    import torch

    if not ref_path.exists():
        return {"reference": str(ref_path), "missing": True}
    ref = torch.load(ref_path, map_location="cpu")
    if ref.shape != got.shape or ref.dtype != got.dtype:
        return {"reference": str(ref_path),
                "error": f"shape/dtype {tuple(got.shape)} {got.dtype} vs reference {tuple(ref.shape)} {ref.dtype}"}
    d = (got.float() - ref.float()).abs()
    return {"reference": str(ref_path), "equal": bool(torch.equal(got, ref)), "max_abs_diff": float(d.max()),
            "mean_abs_diff": float(d.mean()), "ref_sha256": _logits_hash(ref)}


def _load_model(p: dict, work: Work, res: dict):
    """The setup's model, and what to close after (an epk client)."""
    import torch
    import transformers

    setup = p["setup"]
    if setup == "decompressed":
        k = _layers(work.decompressed)
        if k < _layers(work.src):
            # A replicated .epk (the 70B): decompressed/ holds its k encoded layers, decoded.
            from prefill_fit import tied_model

            res["tied"] = {"layers": _layers(work.src), "source_layers": k}
            return tied_model(work, k), None
    if setup == "nf4":
        return _nf4_model(work, res), None
    if setup in ("resident", "decompressed"):
        path = work.src if setup == "resident" else work.decompressed
        model = transformers.LlamaForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="sdpa",
                                                              device_map={"": 0})
        return model.eval(), None
    if setup == "offload-bf16":
        from prefill_offload import offload_bf16

        model = transformers.LlamaForCausalLM.from_pretrained(work.src, dtype=torch.bfloat16,
                                                              attn_implementation="sdpa").eval()
        res["offload"] = offload_bf16(model, 0).memory()
        return model, None
    if setup == "accelerate":
        import accelerate
        from accelerate import dispatch_model, infer_auto_device_map

        res["versions"]["accelerate"] = accelerate.__version__
        model = transformers.LlamaForCausalLM.from_pretrained(work.src, dtype=torch.bfloat16,
                                                              attn_implementation="sdpa").eval()
        cpu_bytes = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.85)
        device_map = infer_auto_device_map(model, max_memory={0: int(p["gpu_bytes"]), "cpu": cpu_bytes},
                                           no_split_module_classes=["LlamaDecoderLayer"], dtype=torch.bfloat16)
        counts = {"gpu": sum(1 for v in device_map.values() if v not in ("cpu", "disk")),
                  "cpu": sum(1 for v in device_map.values() if v == "cpu"),
                  "disk": sum(1 for v in device_map.values() if v == "disk")}
        res["device_map_counts"] = counts
        res["device_map"] = {k: str(v) for k, v in device_map.items()}
        if counts["disk"]:
            raise RuntimeError(f"accelerate put {counts['disk']} modules on disk: more CPU memory is needed")
        if counts["gpu"] == 0:
            # Under a small cap infer_auto_device_map places nothing on the GPU (it keeps room for the largest layer
            # it will offload), and dispatch_model then runs the model on the CPU. accelerate's own API for that
            # case keeps every weight in CPU memory and moves each module's weights to the GPU for its forward.
            res["accelerate_api"] = "cpu_offload"
            return accelerate.cpu_offload(model, execution_device=torch.device("cuda", 0)), None
        res["accelerate_api"] = "dispatch_model"
        model = dispatch_model(model, device_map=device_map,
                               skip_keys=list(getattr(model, "_skip_keys_device_placement", None) or []))
        return model, None
    # epk setups
    import epk
    import epk.torch  # noqa: F401 - registers epk.torch

    res["versions"]["epk"] = getattr(epk, "__version__", "?")
    if p["decode"] == "client":
        import epk.stored
        if not epk.stored.available():
            raise RuntimeError(f"client-side decode: the epk package has none ({epk.stored.missing()})")
    client = epk.Client(p["socket"])
    if not client.has_device_pools:
        raise RuntimeError("epkd serves host pools, not device 0's: it found no usable GPU (see its log)")
    config = transformers.AutoConfig.from_pretrained(work.src)
    config._attn_implementation = "sdpa"
    # None (automatic prefetch depth, no limit on decoded blocks) is load()'s default: left out, not passed.
    kw = {"decode": p["decode"]}
    for k in ("prefetch", "max_decoded_gb", "max_gpu_gb"):
        if p[k] is not None:
            kw[k] = p[k]
    res["load_kwargs"] = kw
    model = epk.torch.load(config, client, MODEL_NAME, **kw)
    return model, client


def _layers(folder: Path) -> int:
    return int(load_json(folder / "config.json")["num_hidden_layers"])


def _nf4_model(work: Work, res: dict):
    """bitsandbytes NF4 from the decompressed BF16 weights, as transformers quantizes at load: every Linear of the
    blocks a Linear4bit (NF4, bnb's default blocksize 64, no double quantization, BF16 compute); the embedding and
    the LM head (transformers leaves lm_head out) stay BF16. The quantization actually made is recorded and checked."""
    import importlib.util

    import torch
    import transformers

    if importlib.util.find_spec("bitsandbytes") is None:
        raise RuntimeError("bitsandbytes absent (no wheel installed: scripts/gpu/trim_bnb_wheel.sh here, then "
                           "prefill_run.sh installs it from .whl/)")
    import bitsandbytes as bnb

    res["versions"]["bitsandbytes"] = bnb.__version__
    q = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                        bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_use_double_quant=False)
    model = transformers.LlamaForCausalLM.from_pretrained(work.decompressed, dtype=torch.bfloat16,
                                                          quantization_config=q, attn_implementation="sdpa",
                                                          device_map={"": 0}).eval()
    lin = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    if not lin:
        raise RuntimeError("no Linear4bit in the model: transformers did not quantize it")
    qs = lin[0].weight.quant_state
    info = {"linear4bit_modules": len(lin), "blocksize": qs.blocksize, "quant_type": qs.quant_type,
            "double_quant": bool(getattr(qs, "nested", False)), "compute_dtype": str(lin[0].compute_dtype),
            "bf16_parameter_bytes": sum(p.numel() * p.element_size() for p in model.parameters()
                                        if p.dtype == torch.bfloat16)}
    res["nf4"] = info
    if (qs.blocksize, qs.quant_type) != (64, "nf4"):
        raise RuntimeError(f"expected NF4 with blocksize 64, got {info}")
    return model


def _client_decode_timeline(torch, cd, forward, grad, ids, log) -> dict:
    """Where epk-client's time goes: every unit's decode run back to back on the side stream with nothing else
    (the decode's own GPU time per forward), and one forward at ids' length under torch.profiler: the decode kernels'
    time and how much of it ran while a kernel of the compute stream was running too."""
    out = {"timing": dict(cd.timing)}
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(cd.side)
    for u in cd.units:
        u.batch.enqueue(cd.side.cuda_stream)
    b.record(cd.side)
    b.synchronize()
    out["decode_alone_ms"] = a.elapsed_time(b)  # the ring's contents are garbage now; the next forward re-decodes
    out["units"] = len(cd.units)
    try:
        from torch.profiler import ProfilerActivity, profile
        with grad():
            forward(ids, 1)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                forward(ids, 1)
                torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type.name == "CUDA" and e.time_range.elapsed_us() > 0]
        dec = [e for e in kernels if "lattice_decode" in e.name]  # codec/cuda's decode kernels
        other = sorted(((e.time_range.start, e.time_range.end) for e in kernels if e not in dec))
        overlap = 0
        for e in dec:
            s0, e0 = e.time_range.start, e.time_range.end
            covered = 0
            cur = s0
            for os_, oe in other:
                if oe <= cur or os_ >= e0:
                    continue
                lo, hi = max(os_, cur), min(oe, e0)
                if hi > lo:
                    covered += hi - lo
                    cur = hi
            overlap += covered
        span = (max(e.time_range.end for e in kernels) - min(e.time_range.start for e in kernels)) if kernels else 0
        out["profile"] = {"tokens": int(ids.shape[1]), "decode_kernels": len(dec),
                          "decode_kernel_us": sum(e.time_range.elapsed_us() for e in dec),
                          "decode_us_overlapping_compute": overlap,
                          "other_kernel_us": sum(e.time_range.elapsed_us() for e in kernels if e not in dec),
                          "gpu_span_us": span, "decode_kernel_names": sorted({e.name for e in dec})[:4]}
    except Exception as e:  # noqa: BLE001 - the profiler may not run on every machine; the rest stands
        out["profile_error"] = f"{type(e).__name__}: {e}"[:300]
    log(f"where the time goes: {json.dumps(out, default=str)}")
    return out


def _pinned_copy_rate(torch) -> float:
    """GB/s of 256 MiB host-to-device copies from pinned memory (median of 5, after one), the rate the capped setups
    stream at: the PCIe bound of a forward is the bytes it copies at this rate."""
    src = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
    dst = torch.empty_like(src, device="cuda")
    dst.copy_(src, non_blocking=True)
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src, non_blocking=True)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    del dst
    return src.numel() / (median(times) * 1e-3) / 1e9


def _attachment_memory(model):
    att = getattr(model, "_epk_attachment", None)
    fn = getattr(att, "memory", None)
    return fn() if callable(fn) else None


def setup_main(params_path: str) -> int:
    p = load_json(params_path)
    if p is None:
        print(f"no params file {params_path}", file=sys.stderr)
        return 1
    work = Work(p["workdir"])
    result_path = Path(p["result"])
    res = load_json(result_path) or {}
    res.update(setup=p["setup"], status="running", params=p, check_len=p["check_len"])
    res.pop("error", None)
    try:
        return _setup_body(p, work, res, result_path)
    except BaseException as e:  # noqa: BLE001 - recorded, then the process fails
        res["status"] = "failed"
        res["error"] = "".join(traceback.format_exception(e))[-4000:]
        write_json(result_path, res)
        print(res["error"], file=sys.stderr, flush=True)
        return 1


def _setup_body(p: dict, work: Work, res: dict, result_path: Path) -> int:
    import torch
    import transformers

    def save():
        write_json(result_path, res)

    def log(msg):
        print(f"[{p['setup']} {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    setup = p["setup"]
    torch.cuda.set_device(0)
    res["versions"] = {"python": sys.version.split()[0], "torch": torch.__version__,
                       "cuda": torch.version.cuda, "transformers": transformers.__version__,
                       "gpu": torch.cuda.get_device_name(0)}
    save()

    def sync_time(fn) -> float:
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1e3

    if setup == "fit-bf16":
        from prefill_fit import fit_body

        fit_body(p, work, res, save, log, _ids, sync_time)
        res["status"] = "done"
        save()
        return 0
    t = time.perf_counter()
    model, client = _load_model(p, work, res)
    torch.cuda.synchronize()
    res["load_s"] = round(time.perf_counter() - t, 2)
    res["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    res["torch_after_load"] = {"allocated_bytes": torch.cuda.memory_allocated(),
                               "max_allocated_bytes": torch.cuda.max_memory_allocated(),
                               "reserved_bytes": torch.cuda.memory_reserved()}
    mem = _attachment_memory(model)
    if mem is not None:
        print("attachment memory after load:", mem, flush=True)
        res["attachment_memory_after_load"] = mem
    if setup in STREAMING_SETUPS and "copy_gbs" not in res:
        res["copy_gbs"] = _pinned_copy_rate(torch)
        log(f"pinned host-to-device copies: {res['copy_gbs']:.1f} GB/s")
    log(f"loaded in {res['load_s']} s, attn {res['attn_implementation']}")
    save()
    vocab = model.config.vocab_size
    seed = p["seed"]
    # An earlier attempt that fell back to no_grad (below) keeps it, so that every figure of a setup is under one mode.
    if not str(res.get("grad_mode", "")).startswith("no_grad"):
        res["grad_mode"] = p["grad_mode"]
    grad = torch.inference_mode if res["grad_mode"] == "inference" else torch.no_grad

    def forward(ids, keep):
        out = model(input_ids=ids, use_cache=False, logits_to_keep=keep)
        return out.logits

    # The logits at check_len, all positions, against the references (the first forward: it warms up too).
    if "logits" not in res:
        ids = _ids(p["check_len"], vocab, seed)
        try:
            with grad():
                logits = forward(ids, 0)
        except RuntimeError as e:
            if res["grad_mode"] != "inference" or "nference" not in str(e):
                raise
            # Hooks that make tensors outside inference mode and use them inside it (or the reverse) can refuse
            # inference tensors; no_grad measures the same kernels.
            log(f"torch.inference_mode refused ({e}); using torch.no_grad")
            res["grad_mode"] = f"no_grad (inference_mode failed: {str(e)[:200]})"
            grad = torch.no_grad
            with grad():
                logits = forward(ids, 0)
        got = logits.cpu()
        del logits
        lg = {"length": p["check_len"], "sha256": _logits_hash(got), "finite": bool(torch.isfinite(got).all()),
              "slice": [float(v) for v in got[0, -1, :8].float()]}
        if setup in REF_SETUPS:
            work.ref.mkdir(parents=True, exist_ok=True)
            path = work.ref_logits(setup, p["check_len"])
            torch.save(got, str(path) + ".tmp")
            os.replace(str(path) + ".tmp", path)
        if setup != "decompressed":
            lg["vs_decompressed"] = _compare(got, work.ref_logits("decompressed", p["check_len"]))
        if setup not in REF_SETUPS:
            lg["vs_resident"] = _compare(got, work.ref_logits("resident", p["check_len"]))
        res["logits"] = lg
        log(f"logits: {json.dumps({k: v for k, v in lg.items() if k.startswith('vs_')}, default=str)}")
        save()

    if p["timing"]:
        res.setdefault("prefill", {})
        for n in p["lengths"]:
            done = res["prefill"].get(str(n))
            if done and len(done["times_ms"]) >= p["runs"]:
                continue
            ids = _ids(n, vocab, seed)
            torch.cuda.reset_peak_memory_stats()
            with grad():
                warm = [sync_time(lambda: forward(ids, p["logits_to_keep"])) for _ in range(p["warmup"])]
                times = [sync_time(lambda: forward(ids, p["logits_to_keep"])) for _ in range(p["runs"])]
            res["prefill"][str(n)] = {"times_ms": times, "median_ms": median(times), "warmup_ms": warm,
                                      "torch_max_allocated_bytes": torch.cuda.max_memory_allocated(),
                                      "torch_reserved_bytes": torch.cuda.memory_reserved()}
            log(f"prefill {n}: median {median(times):.1f} ms of {[round(x, 1) for x in times]}, warm-up "
                f"{[round(x, 1) for x in warm]}")
            save()

    cd = getattr(getattr(model, "_epk_attachment", None), "client_decode", None)
    if cd is not None and p["timing"] and "where_time_goes" not in res:
        res["where_time_goes"] = _client_decode_timeline(torch, cd, forward, grad, _ids(4096, vocab, seed), log)
        save()

    if p["generate"] and not res.get("generate"):
        ids = _ids(p["gen_prompt"], vocab, seed)
        pad = model.config.eos_token_id
        pad = pad[0] if isinstance(pad, (list, tuple)) else pad
        if pad is None:
            pad = 0

        def gen(k):
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=k,
                                 min_new_tokens=k, do_sample=False, use_cache=True, pad_token_id=pad)
            if out.shape[1] != ids.shape[1] + k:
                raise RuntimeError(f"generate made {out.shape[1] - ids.shape[1]} tokens, not {k}")

        torch.cuda.reset_peak_memory_stats()
        with grad():
            warm = sync_time(lambda: gen(p["gen_warmup_tokens"]))
            times = [sync_time(lambda: gen(p["gen_tokens"])) for _ in range(p["gen_runs"])]
        res["generate"] = {"prompt": p["gen_prompt"], "new_tokens": p["gen_tokens"], "times_ms": times,
                           "median_ms": median(times), "warmup_ms": warm,
                           "warmup_tokens": p["gen_warmup_tokens"],
                           "torch_max_allocated_bytes": torch.cuda.max_memory_allocated()}
        log(f"generate {p['gen_tokens']} after {p['gen_prompt']}: median {median(times):.0f} ms of "
            f"{[round(x) for x in times]}")
        save()

    mem = _attachment_memory(model)
    if mem is not None:
        print("attachment memory at the end:", mem, flush=True)
        res["attachment_memory_at_end"] = mem
    # The peak statistics were reset before each measurement: the process's peak is the largest of the parts.
    parts = [res["torch_after_load"]["max_allocated_bytes"], torch.cuda.max_memory_allocated()]
    parts += [e.get("torch_max_allocated_bytes", 0) for e in (res.get("prefill") or {}).values()]
    parts.append((res.get("generate") or {}).get("torch_max_allocated_bytes", 0))
    res["torch_max_allocated_bytes"] = max(parts)
    res["torch_reserved_bytes_at_end"] = torch.cuda.memory_reserved()
    att = getattr(model, "_epk_attachment", None)
    if att is not None:
        att.close()
    if client is not None:
        client.close()
    res["status"] = "done"
    save()
    return 0


# ---------------------------------------------------------------------------------------------------------------------
# make-model

def llama_config(layers: int, shape: str = "8b"):
    import transformers

    kw = dict(SHAPES[shape])
    kw["num_hidden_layers"] = layers
    return transformers.LlamaConfig(**kw, dtype="bfloat16", architectures=["LlamaForCausalLM"])


def make_model(args) -> int:
    """Random bf16 weights (seeded: N(0, 0.02) for every matrix, ones for the norms), built on the GPU, saved with
    save_pretrained (config.json + safetensors shards). OUT/.complete marks a finished save."""
    import torch
    import transformers

    out = Path(args.out)
    if (out / ".complete").exists() and not args.force:
        print(f"{out} exists (.complete); --force makes it again")
        return 0
    if args.layers < 1:
        raise SystemExit("--layers must be >= 1")
    config = llama_config(args.layers, args.shape)
    if args.config_only:
        # The shape alone (config.json), for a model whose weights are made another way (the replicated 70B .epk).
        out.mkdir(parents=True, exist_ok=True)
        config.save_pretrained(out)
        (out / ".complete").write_text(json.dumps({"layers": args.layers, "shape": args.shape,
                                                   "config_only": True}) + "\n")
        print(f"make-model: {args.shape} config, {args.layers} layers, in {out}")
        return 0
    t0 = time.perf_counter()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = transformers.LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    torch.manual_seed(args.seed)
    n = 0
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if param.dtype != torch.bfloat16 or param.device.type != "cuda":
                raise RuntimeError(f"{name}: {param.dtype} on {param.device}, expected bfloat16 on cuda")
            if param.dim() == 1:
                param.fill_(1.0)
            else:
                param.normal_(0.0, 0.02)
            n += param.numel()
    torch.cuda.synchronize()
    t_build = time.perf_counter() - t0
    if out.exists():
        shutil.rmtree(out)
    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    model.to("cpu")  # save_pretrained writes host tensors; this is one copy of the weights at PCIe speed
    model.save_pretrained(partial, max_shard_size="5GB")
    os.replace(partial, out)
    t_save = time.perf_counter() - t0 - t_build
    info = {"shape": args.shape, "layers": args.layers, "parameters": n, "seed": args.seed, "build_s": round(t_build, 2),
            "save_s": round(t_save, 2), "transformers": transformers.__version__, "torch": torch.__version__}
    (out / ".complete").write_text(json.dumps(info) + "\n")
    print(f"make-model: {n / 1e9:.3f} B parameters, {args.layers} layers: built in {t_build:.1f} s, saved to {out} in "
          f"{t_save:.1f} s")
    return 0
