"""The prefill benchmark's compute-only models (bench/prefill/prefill_bench.py): for a shape too large to keep
resident in BF16 (the 70B), the same shape with fewer layers, each layer's weights its own.

fit_body: random BF16 models of each of --fit-layers layer counts, built on the GPU one after another (the shape of
W/src/config.json, N(0, 0.02) weights: their values do not change a GEMM's time), each timed at every length as the
other setups are; the report fits a line in the layer count (prefill_tables.fit_estimate).

tied_model: the model of W/src/config.json with its weights from W/decompressed, which holds fewer layers: layer l's
parameters are layer (l mod k)'s tensors, as epk_replicate_layers repeats the encoded layers, so this model computes
what the replicated .epk's model computes, from the same decoded values, with every weight resident (each layer still
reads its own 1.7 GB of weights per forward: no cache keeps a layer's weights for the next)."""

from __future__ import annotations

import re
import time

from prefill_report import median


def tied_model(work, layers_src: int):
    """The decompressed model at W/src/config.json's layer count, tied to its layers_src decoded layers. Parameters
    are made on the meta device first (buffers, the rotary tables, normally), then every one is bound to a decoded
    tensor on GPU 0; a parameter with no decoded tensor is an error."""
    import torch
    import transformers
    from safetensors.torch import load_file

    config = transformers.AutoConfig.from_pretrained(work.src)
    config._attn_implementation = "sdpa"
    register = torch.nn.Module.register_parameter

    def on_meta(self, name, param):
        register(self, name, param)
        if param is not None:
            self._parameters[name] = torch.nn.Parameter(self._parameters[name].to("meta"), requires_grad=False)

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    torch.nn.Module.register_parameter = on_meta
    try:
        model = transformers.LlamaForCausalLM(config)
    finally:
        torch.nn.Module.register_parameter = register
        torch.set_default_dtype(previous)
    decoded = {}
    for f in sorted(work.decompressed.glob("*.safetensors")):
        decoded.update(load_file(str(f), device="cuda:0"))
    layer = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
    for mname, mod in model.named_modules():
        for pname, p in list(mod._parameters.items()):
            if p is None:
                continue
            qname = f"{mname}.{pname}" if mname else pname
            m = layer.match(qname)
            src = f"model.layers.{int(m.group(1)) % layers_src}.{m.group(2)}" if m else qname
            if src not in decoded:
                raise RuntimeError(f"{qname}: no decoded tensor {src} in {work.decompressed}")
            t = decoded[src]
            if tuple(t.shape) != tuple(p.shape) or t.dtype != p.dtype:
                raise RuntimeError(f"{qname} is {list(p.shape)} {p.dtype}; {src} is {list(t.shape)} {t.dtype}")
            mod._parameters[pname] = torch.nn.Parameter(t, requires_grad=False)
    for mod in model.modules():
        for bname, buf in list(mod._buffers.items()):
            if buf is not None:
                mod._buffers[bname] = buf.to("cuda:0")
    return model.eval()


def fit_body(p: dict, work, res: dict, save, log, ids_of, sync_time) -> None:
    """fit-bf16's measurements into res["fit"]: {"layers", "target_layers", "prefill": {length: {k: {"times_ms",
    "median_ms", "warmup_ms"}}}}; a (length, k) already measured is kept (a resumed run)."""
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(work.src)
    config._attn_implementation = "sdpa"
    fit = res.setdefault("fit", {})
    fit.update(layers=list(p["fit_layers"]), target_layers=config.num_hidden_layers)
    fit.setdefault("prefill", {})
    grad = torch.inference_mode if p["grad_mode"] == "inference" else torch.no_grad
    for k in p["fit_layers"]:
        if all(str(k) in fit["prefill"].get(str(n), {}) for n in p["lengths"]):
            continue
        t0 = time.perf_counter()
        config.num_hidden_layers = k
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device("cuda"):
                model = transformers.LlamaForCausalLM(config).eval()
        finally:
            torch.set_default_dtype(previous)
        torch.manual_seed(k)
        with torch.no_grad():
            for param in model.parameters():
                if param.dim() == 1:
                    param.fill_(1.0)
                else:
                    param.normal_(0.0, 0.02)
        torch.cuda.synchronize()
        log(f"{k} layers built in {time.perf_counter() - t0:.1f} s")
        for n in p["lengths"]:
            if str(k) in fit["prefill"].get(str(n), {}):
                continue
            ids = ids_of(n, config.vocab_size, p["seed"])

            def forward():
                model(input_ids=ids, use_cache=False, logits_to_keep=p["logits_to_keep"])

            with grad():
                warm = [sync_time(forward) for _ in range(p["warmup"])]
                times = [sync_time(forward) for _ in range(p["runs"])]
            fit["prefill"].setdefault(str(n), {})[str(k)] = {"times_ms": times, "median_ms": median(times),
                                                             "warmup_ms": warm}
            log(f"{k} layers, prefill {n}: median {median(times):.1f} ms of {[round(x, 1) for x in times]}")
            save()
        model = None  # the next layer count's model needs the memory
        torch.cuda.empty_cache()
