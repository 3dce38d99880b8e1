"""The prefill benchmark's result tables (bench/prefill/prefill_bench.py): prefill and generation, the cap sweep, the
compute-only line of the 70B shape, and the issues' targets judged on the figures. Only the standard library: tested
without torch or a GPU (tests/bench/prefill_bench_test.py)."""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Sequence, Tuple

from prefill_report import (CAP_RUN_SETUPS, CAPPED_SETUPS, EPK_SETUPS, GEN_SETUPS, MIB, _mib, _ms, gpu_total, key_order,
                            prefill_median, split_key)


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> Tuple[float, float]:
    """Least squares y = a + b x: (a, b). Needs two distinct x."""
    if len(xs) != len(ys) or len(set(xs)) < 2:
        raise ValueError(f"a line needs two distinct x, got {list(xs)}")
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def fit_estimate(res: Optional[dict], length: int) -> Optional[dict]:
    """fit-bf16's compute-only estimate at `length` tokens: the prefill medians of its k-layer models (random bf16,
    resident) fitted with a line in k, read at the model's layer count: intercept (embedding, head, the rest outside
    the blocks) + layers x per-layer slope. None where fewer than two layer counts were measured."""
    fit = (res or {}).get("fit") or {}
    per_k = (fit.get("prefill") or {}).get(str(length)) or {}
    pts = sorted((int(k), e["median_ms"]) for k, e in per_k.items())
    if len({k for k, _ in pts}) < 2 or not fit.get("target_layers"):
        return None
    a, b = fit_line([k for k, _ in pts], [v for _, v in pts])
    layers = int(fit["target_layers"])
    worst = max(abs(a + b * k - v) / v for k, v in pts)
    return {"layers": layers, "intercept_ms": a, "per_layer_ms": b, "estimate_ms": a + b * layers,
            "points": pts, "worst_residual": worst}


def _logits_text(res: dict) -> str:
    lg = res.get("logits") or {}
    if res.get("setup") == "decompressed":
        return "reference" if lg else "n/a"
    if res.get("setup") == "fit-bf16":
        return "random weights (timing only)"
    ref = "resident" if res.get("setup") == "accelerate" else "decompressed"
    c = lg.get("vs_" + ref)
    if not c:
        return "n/a"
    if c.get("missing"):
        return f"no {ref} reference"
    if c.get("error"):
        return c["error"]
    if c.get("equal"):
        return f"bit-equal to {ref}"
    return f"max abs diff {c['max_abs_diff']:.4g} vs {ref}"


def _status_note(res: dict) -> str:
    st = res.get("status", "not run")
    if st == "done":
        return ""
    if st == "failed":
        err = (res.get("error") or "").strip().splitlines()
        return "failed: " + (err[-1][:120] if err else "?")
    return st


def _ordered(results: Dict[str, dict]) -> List[str]:
    return sorted(results, key=key_order)


def format_tables(results: Dict[str, dict], lengths: Sequence[int]) -> str:
    """The prefill table, the generation table, the cap sweep and the issues' targets, as markdown. results: run key
    (run_key) -> result."""
    rows = ["| run | tokens | median ms | runs ms (min-max) | x resident | torch peak MiB | client MiB | epkd MiB "
            "| client+epkd MiB | device used MiB | logits at check length |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    resident = results.get("resident")
    for key in _ordered(results):
        res = results[key]
        setup = res.get("setup") or split_key(key)[0]
        if setup == "fit-bf16":
            continue  # its k-layer models' times are in the compute-only section
        mem = res.get("memory") or {}
        memcols = (f"{_mib(mem.get('client_bytes'))} | {_mib(mem.get('epkd_bytes'))} | "
                   f"{_mib(mem.get('sum_bytes'))} | {_mib(mem.get('device_delta_bytes'))}")
        note = _status_note(res)
        if setup == "decompressed" and not res.get("prefill"):
            rows.append(f"| {key} | {res.get('check_len', '')} | - | - | - | - | {memcols} | {_logits_text(res)}"
                        f"{' (' + note + ')' if note else ''} |")
            continue
        measured = [int(k) for k in (res.get("prefill") or {})]
        shown = [n for n in lengths if n in measured] + sorted(n for n in measured if n not in lengths)
        if not shown:
            rows.append(f"| {key} | - | {note or 'no prefill measured'} | - | - | - | {memcols} | "
                        f"{_logits_text(res)} |")
            continue
        for n in shown:
            e = res["prefill"][str(n)]
            base = prefill_median(resident, n)
            ratio = f"{e['median_ms'] / base:.2f}x" if base else "n/a"
            spread = f"{_ms(min(e['times_ms']))}-{_ms(max(e['times_ms']))}"
            rows.append(f"| {key} | {n} | {_ms(e['median_ms'])} | {spread} | {ratio} | "
                        f"{_mib(e.get('torch_max_allocated_bytes'))} | {memcols} | "
                        f"{_logits_text(res)}{' (' + note + ')' if note else ''} |")
    out = ["## Prefill (batch 1, no KV cache, sdpa; torch peak: the client's max_memory_allocated at that length; "
           "NVML columns: peaks over the whole setup, load included)", ""] + rows

    gen = ["| run | prompt | new tokens | median total ms | ms/token (total/N) | decode ms/token "
           "((total - prefill)/(N-1)) | runs |", "|---|---|---|---|---|---|---|"]
    for key in _ordered(results):
        res = results[key]
        setup = res.get("setup") or split_key(key)[0]
        g = res.get("generate")
        if not g:
            if setup in GEN_SETUPS:
                gen.append(f"| {key} | - | - | {_status_note(res) or 'not measured'} | - | - | - |")
            continue
        n = g["new_tokens"]
        total = g["median_ms"]
        pre = prefill_median(res, g["prompt"])
        decode = f"{(total - pre) / (n - 1):.1f}" if pre is not None and n > 1 else "n/a"
        gen.append(f"| {key} | {g['prompt']} | {n} | {_ms(total)} | {total / n:.1f} | {decode} | "
                   f"{len(g['times_ms'])} |")
    out += ["", "## Generation (greedy, KV cache)", ""] + gen

    out += ["", "## Targets (issue 14)", ""] + targets(results)
    sweep = cap_table(results, lengths)
    if sweep:
        out += ["", "## Under a GPU memory cap (issue 32): one row per setup and cap", ""] + sweep
        out += [""] + capped_targets(results)
    compute = compute_only_lines(results, lengths)
    if compute:
        out += ["", "## Against compute-only (the model's forward with every weight resident in BF16)", ""] + compute
    mps = (results.get("epk-daemon-mps") or {}).get("mps")
    if mps is not None:
        held = ((results["epk-daemon-mps"].get("memory") or {}).get("mps_server_bytes"))
        out.append(f"- MPS servers during epk-daemon-mps: {mps.get('servers') or 'none seen (MPS not in use)'}; "
                   f"the server's own GPU memory {_mib(held)} MiB (in the device column, not in client+epkd)")
    for key in _ordered(results):
        res = results[key]
        acc = res.get("device_map_counts")
        if acc and (res.get("setup") or split_key(key)[0]) == "accelerate":
            out.append(f"- {key}: max_memory GPU {_mib((res.get('params') or {}).get('gpu_bytes'))} MiB "
                       f"({(res.get('params') or {}).get('gpu_bytes_from', '')}); modules on the GPU {acc.get('gpu')}, "
                       f"offloaded to the CPU {acc.get('cpu')}"
                       + (" (none on the GPU: accelerate.cpu_offload, each module's weights moved to the GPU for its "
                          "forward)" if res.get("accelerate_api") == "cpu_offload" else ""))
    return "\n".join(out)


def targets(results: Dict[str, dict]) -> List[str]:
    """The issue's targets, each with the figures it was judged on (n/a where one is missing)."""
    lines = []
    res, client, acc = results.get("resident"), results.get("epk-client"), results.get("accelerate")
    for n, limit in ((4096, 1.05), (16384, 1.02)):
        a, b = prefill_median(client, n), prefill_median(res, n)
        if a is None or b is None:
            lines.append(f"- epk-client at {n} tokens within {limit:.2f}x of resident: n/a")
        else:
            r = a / b
            lines.append(f"- epk-client at {n} tokens within {limit:.2f}x of resident: {r:.3f}x "
                         f"({a:.1f} vs {b:.1f} ms): {'met' if r <= limit else 'missed'}")
    c = gpu_total(client)
    mem = (res or {}).get("memory") or {}
    r_mem = mem.get("client_bytes") if mem.get("client_bytes") is not None else mem.get("device_delta_bytes")
    if c is None or not r_mem:
        lines.append("- epk-client GPU memory (client + epkd) at most 40% of resident's: n/a")
    else:
        f = c / r_mem
        lines.append(f"- epk-client GPU memory (client + epkd) at most 40% of resident's: {100 * f:.1f}% "
                     f"({c / MIB:.0f} of {r_mem / MIB:.0f} MiB): {'met' if f <= 0.40 else 'missed'}")
    a, b = prefill_median(acc, 4096), prefill_median(client, 4096)
    if a is None or b is None:
        lines.append("- epk-client at least 15x faster than accelerate at 4096 tokens: n/a")
    else:
        r = a / b
        lines.append(f"- epk-client at least 15x faster than accelerate at 4096 tokens: {r:.1f}x "
                     f"({b:.1f} vs {a:.1f} ms): {'met' if r >= 15 else 'missed'}")
    for key in _ordered(results):
        s = results[key].get("setup") or split_key(key)[0]
        c = (results[key].get("logits") or {}).get("vs_decompressed")
        if s in EPK_SETUPS and c and not c.get("missing") and not c.get("error"):
            lines.append(f"- {key} logits bit-equal to the decompressed model's: "
                         f"{'yes' if c.get('equal') else 'NO (max abs diff %.4g)' % c['max_abs_diff']}")
    return lines


def cap_of(key: str, res: Optional[dict]) -> Optional[float]:
    """The cap (GiB) a run was made under: its key's, else (a result from before the sweep) its params' cap_bytes."""
    cap = split_key(key)[1]
    if cap is None:
        b = ((res or {}).get("params") or {}).get("cap_bytes")
        cap = b / 2**30 if b else None
    return cap


def caps_in(results: Dict[str, dict]) -> List[float]:
    """The caps of the runs made per cap (CAP_RUN_SETUPS), smallest first."""
    return sorted({c for k, r in results.items() if split_key(k)[0] in CAP_RUN_SETUPS
                   and (c := cap_of(k, r)) is not None})


def at_cap(results: Dict[str, dict], setup: str, cap: float) -> Optional[dict]:
    """setup's result at `cap`: its run under that cap (CAP_RUN_SETUPS), else its one run, whose GPU memory does not
    depend on the cap."""
    if setup not in CAP_RUN_SETUPS:
        return results.get(setup)
    for k, r in results.items():
        if split_key(k)[0] == setup and cap_of(k, r) == cap:
            return r
    return None


def fits_text(res: Optional[dict], cap: float) -> str:
    peak = gpu_total(res)
    if peak is None:
        return "n/a (no NVML peak)"
    limit = int(cap * 2**30)
    if peak <= limit:
        return f"fits ({_mib(peak)} <= {_mib(limit)} MiB)"
    return f"does not fit: peak {_mib(peak)} MiB > cap {_mib(limit)} MiB"


def _share_text(setup: str, res: dict) -> str:
    p = res.get("params") or {}
    if setup == "epk-client-host" and p.get("max_gpu_gb") is not None:
        return f"max_gpu_gb {p['max_gpu_gb']:g}"
    if setup == "accelerate" and p.get("gpu_bytes"):
        c = res.get("device_map_counts") or {}
        return (f"max_memory {_mib(p['gpu_bytes'])} MiB" + (f", {c.get('gpu')} of {c.get('gpu', 0) + c.get('cpu', 0)} "
                                                            f"modules on the GPU" if c else "")
                + (", cpu_offload" if res.get("accelerate_api") == "cpu_offload" else ""))
    if setup == "offload-bf16":
        return "fixed: embedding, head, 2 block slots (not capped)"
    if setup == "nf4":
        return "fixed: the whole model (not capped)"
    return "-"


def cap_table(results: Dict[str, dict], lengths: Sequence[int]) -> List[str]:
    """One row per (capped setup, cap): prefill at each length and generation, each with its ratio to resident BF16,
    the setup's NVML peak (client + epkd) against the cap, and its logits. Setups whose memory does not depend on
    the cap (offload-bf16, nf4) are the same run on every cap's rows, judged against each cap."""
    caps = caps_in(results)
    if not caps:
        caps = sorted({c for k, r in results.items() if split_key(k)[0] in CAPPED_SETUPS
                       and (c := cap_of(k, r)) is not None})
    if not caps:
        return []
    resident = results.get("resident")
    head = ("| setup | cap GiB | GPU share | " + " | ".join(f"{n} tokens ms (x resident)" for n in lengths)
            + " | generation ms/token (x resident) | client+epkd peak | under the cap | logits |")
    rows = [head, "|" + "---|" * (7 + len(lengths))]
    rg = (resident or {}).get("generate")
    for cap in caps:
        for setup in CAPPED_SETUPS:
            res = at_cap(results, setup, cap)
            if res is None:
                continue
            cells = []
            for n in lengths:
                a, b = prefill_median(res, n), prefill_median(resident, n)
                cells.append("n/a" if a is None else f"{_ms(a)}" + (f" ({a / b:.2f}x)" if b else ""))
            g = res.get("generate")
            if g:
                t = g["median_ms"] / g["new_tokens"]
                gen = f"{t:.1f}" + (f" ({t / (rg['median_ms'] / rg['new_tokens']):.2f}x)" if rg else "")
            else:
                gen = "n/a"
            note = _status_note(res)
            rows.append(f"| {setup} | {cap:g} | {_share_text(setup, res)} | " + " | ".join(cells)
                        + f" | {gen} | {_mib(gpu_total(res))} MiB | {fits_text(res, cap)} | {_logits_text(res)}"
                        + (f" ({note})" if note else "") + " |")
    return rows


def capped_targets(results: Dict[str, dict]) -> List[str]:
    """Issue 32's targets at each cap: epk-client-host against resident and against the BF16 offloader."""
    lines = []
    res, off = results.get("resident"), results.get("offload-bf16")
    for cap in caps_in(results):
        host = at_cap(results, "epk-client-host", cap)
        if host is None:
            continue
        tag = f"epk-client-host at {cap:g} GiB"
        att = host.get("attachment_memory_after_load")
        if att:
            lines.append(f"- {tag}: attachment {json.dumps(att, sort_keys=True)}")
        streamed = (att or {}).get("streamed_tier_bytes")
        rate = host.get("copy_gbs")
        if streamed is not None and rate and prefill_median(res, 1024) is not None:
            bound = streamed / (rate * 1e9) * 1e3 + prefill_median(res, 1024)
            a = prefill_median(host, 1024)
            lines.append(f"- {tag}, PCIe bound at 1024 tokens: {streamed / 1e9:.2f} GB streamed at {rate:.1f} GB/s + "
                         f"resident's forward = {bound:.1f} ms; "
                         + (f"{a:.1f} ms = {a / bound:.2f}x of it (target 1.1x: "
                            f"{'met' if a / bound <= 1.1 else 'missed'})" if a is not None else "n/a"))
        for n, limit, peer in ((1024, None, 2.5), (4096, 1.15, 1.8), (16384, 1.02, 1.0)):
            a, b, c = prefill_median(host, n), prefill_median(res, n), prefill_median(off, n)
            if a is None:
                lines.append(f"- {tag}, {n} tokens: n/a")
                continue
            parts = [f"{a:.1f} ms"]
            if b is not None:
                parts.append(f"{a / b:.3f}x resident" + (f" (target {limit:.2f}x: "
                                                          f"{'met' if a / b <= limit else 'missed'})" if limit else ""))
            if c is not None:
                parts.append(f"{c / a:.2f}x faster than offload-bf16 ({c:.1f} ms; target {peer:.1f}x: "
                             f"{'met' if c / a >= peer else 'missed'}; offload-bf16 {fits_text(off, cap)})")
            lines.append(f"- {tag}, {n} tokens: " + ", ".join(parts))
        gh, go = host.get("generate"), (off or {}).get("generate")
        if gh and go:
            th, to = gh["median_ms"] / gh["new_tokens"], go["median_ms"] / go["new_tokens"]
            lines.append(f"- {tag}, generation ms/token: {th:.1f}, offload-bf16 {to:.1f}: {th / to:.2f} of it "
                         f"(target at most 0.33: {'met' if th / to <= 0.34 else 'missed'})")
        lines.append(f"- {tag}, GPU memory: {fits_text(host, cap)}")
    return lines


# The 70B shape's targets against compute-only (issue 32): prefill at these lengths within these factors.
COMPUTE_ONLY_TARGETS = {4096: 1.15, 16384: 1.05}


def compute_only_lines(results: Dict[str, dict], lengths: Sequence[int]) -> List[str]:
    """Compute-only, two ways, and the capped epk runs against it: measured, the decompressed model timed (when its
    layers are tied to fewer decoded layers, as the replicated .epk's are, it is the whole model's forward with the
    weights of a resident BF16 model); estimated, fit-bf16's line in the layer count. Each target is judged against
    both figures that exist."""
    dec, fit = results.get("decompressed"), results.get("fit-bf16")
    timed = bool((dec or {}).get("prefill"))
    if not timed and not fit:
        return []
    lines = []
    tied = (dec or {}).get("tied")
    if timed:
        lines.append("- measured: the decompressed model's prefill"
                     + (f" ({tied['layers']} layers tied to the {tied['source_layers']} decoded layers, "
                        f"layer l = layer l mod {tied['source_layers']}, as epk_replicate_layers wrote them)"
                        if tied else ""))
    if fit:
        note = _status_note(fit)
        lines.append(f"- estimated: fit-bf16, random BF16 models of {(fit.get('fit') or {}).get('layers')} layers "
                     f"(untied, resident), a line in the layer count" + (f" ({note})" if note else ""))
    hosts = [k for k in _ordered(results) if split_key(k)[0] == "epk-client-host"]
    for n in sorted(set(lengths) | set(COMPUTE_ONLY_TARGETS)):
        direct = prefill_median(dec, n) if timed else None
        est = fit_estimate(fit, n)
        if direct is None and est is None:
            continue
        parts = []
        if direct is not None:
            parts.append(f"measured {direct:.1f} ms")
        if est is not None:
            pts = ", ".join(f"{k}: {v:.1f}" for k, v in est["points"])
            parts.append(f"fit {est['intercept_ms']:.1f} + {est['layers']} x {est['per_layer_ms']:.2f} = "
                         f"{est['estimate_ms']:.1f} ms (layers: ms {pts}; worst residual "
                         f"{100 * est['worst_residual']:.1f}%)")
        lines.append(f"- compute-only at {n} tokens: " + "; ".join(parts))
        limit = COMPUTE_ONLY_TARGETS.get(n)
        for k in hosts:
            a = prefill_median(results[k], n)
            if a is None:
                continue
            verdicts = []
            for name, base in (("measured", direct), ("fit", est and est["estimate_ms"])):
                if base:
                    verdicts.append(f"{a / base:.3f}x {name}" + (f" (target {limit:.2f}x: "
                                                                 f"{'met' if a / base <= limit else 'missed'})"
                                                                 if limit else ""))
            lines.append(f"  - {k}: {a:.1f} ms = " + ", ".join(verdicts))
    dg = (dec or {}).get("generate")
    for k in hosts:
        g = results[k].get("generate")
        if g:
            t = g["median_ms"] / g["new_tokens"]
            lines.append(f"- {k} generation: {t:.1f} ms/token" + (
                f" (compute-only, the decompressed model: {dg['median_ms'] / dg['new_tokens']:.1f} ms/token)"
                if dg else ""))
    return lines
