"""The prefill benchmark's pure parts (bench/prefill/prefill_bench.py): its setups, the attribution of NVML's
processes to roles, memory summaries, epkd's config text, and the result tables with the issue's targets. Only the
standard library: tested without torch or a GPU (tests/bench/prefill_bench_test.py)."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

SETUPS = ("decompressed", "resident", "epk-client", "epk-daemon", "epk-daemon-mps", "accelerate", "epk-client-host",
          "offload-bf16")
EPK_SETUPS = ("epk-client", "epk-daemon", "epk-daemon-mps", "epk-client-host")
GEN_SETUPS = ("resident", "epk-client", "accelerate", "epk-client-host", "offload-bf16")
# Setups under the GPU memory cap (issue 32): epk-client-host (epkd keeps no tier on the GPU; the client keeps what
# its limit leaves and streams the rest from its host tier) and its streaming peer, the BF16 prefetching offloader.
CAPPED_SETUPS = ("epk-client-host", "offload-bf16")
REF_SETUPS = ("decompressed", "resident")  # their logits are saved as references
MODEL_NAME = "llama"  # the model's name in epkd's config
MIB = 1 << 20

# ---------------------------------------------------------------------------------------------------------------------
# Pure helpers (no torch, no NVML)

def median(xs: Sequence[float]) -> float:
    if not xs:
        raise ValueError("median of no values")
    return float(statistics.median(xs))


def load_json(path) -> Optional[dict]:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def write_json(path, obj) -> None:
    """Atomically (a reader never sees half a file, a kill never leaves one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True, default=str)
    os.replace(tmp, path)


def toml_string(s: str) -> str:
    # A JSON string of printable ASCII is a TOML basic string; anything else is refused rather than guessed at.
    if not s.isprintable() or not s.isascii():
        raise ValueError(f"not a plain ASCII string for epkd's config: {s!r}")
    return json.dumps(s)


def epkd_config_text(socket_path: str, model_path: str, budget_mb: int, extra: Sequence[str] = ()) -> str:
    """epkd's TOML config (daemon/config/config.h lists the keys): one model, device 0's pool with budget_mb MiB. `extra`:
    further top-level `key = value` lines, as given (e.g. a setting that client-side decode needs)."""
    if budget_mb < 1:
        raise ValueError(f"budget_mb must be >= 1, not {budget_mb}")
    lines = [
        f"socket = {toml_string(socket_path)}",
        f"budget_mb = {int(budget_mb)}",
        "devices = [0]",
        'log_level = "info"',
    ]
    for e in extra:
        if "=" not in e:
            raise ValueError(f"--epkd-setting '{e}': expected KEY = VALUE (TOML)")
        lines.append(e)
    lines += ["", "[[model]]", f"name = {toml_string(MODEL_NAME)}", f"path = {toml_string(model_path)}", ""]
    return "\n".join(lines)


def attribute_pids(seen: Dict[int, dict], roles: Sequence[Tuple[str, int, float]], baseline: Iterable[int],
                   mps: bool) -> Dict[int, str]:
    """Which process each GPU pid NVML reported is: a role name ("client", "epkd"), "mps-server", "baseline" (on the
    GPU before the setup started) or "other".

    seen: pid -> {"first": seconds since sampling began, "lists": the NVML lists that named it ("compute", "mps",
    "graphics"), "name": NVML's process name or None}. roles: (role, pid in this process's namespace, when it was
    started, on the same clock as "first").
    NVML reports host pids, which differ from ours inside a container with its own pid namespace; then a pid is
    matched by its process name, else by order: a process shows up on the GPU after it starts, so an unmatched pid
    goes to the role started last before it first appeared (the driver starts epkd and waits for it to be on the GPU
    before it starts the client). Under MPS, the server is the pid named only in the compute list while clients are
    named in the MPS list."""
    baseline = set(baseline)
    out: Dict[int, str] = {}
    taken = set()
    by_pid = {pid: role for role, pid, _ in roles}
    order = sorted(seen, key=lambda p: (seen[p]["first"], p))
    for pid in order:
        if pid in baseline:
            out[pid] = "baseline"
        elif pid in by_pid and by_pid[pid] not in taken:
            out[pid] = by_pid[pid]
            taken.add(by_pid[pid])
    any_mps_client = any("mps" in seen[p]["lists"] for p in seen if p not in baseline)
    for pid in order:
        if pid in out:
            continue
        name = os.path.basename(seen[pid].get("name") or "").lower()
        role = None
        if "mps-server" in name or "mps_server" in name:
            role = "mps-server"
        elif "epkd" in name:
            role = "epkd"
        elif "python" in name:
            role = "client"
        elif mps and any_mps_client and "mps" not in seen[pid]["lists"]:
            role = "mps-server"
        if role is not None and (role == "mps-server" or role not in taken):
            out[pid] = role
            taken.add(role)
    for pid in order:
        if pid in out:
            continue
        first = seen[pid]["first"]
        cands = [(t, role) for role, _, t in roles if role not in taken and t <= first]
        if cands:
            role = max(cands)[1]
            out[pid] = role
            taken.add(role)
        else:
            out[pid] = "other"
    return out


def summarize_samples(samples: Sequence[Tuple[float, Dict[int, Optional[int]], Optional[int]]],
                      roles_of: Dict[int, str], baseline_used: Optional[int]) -> dict:
    """Peaks over the samples (t, {pid: used bytes or None}, device used bytes): per role, the largest client + epkd
    sum in one sample, and the device's used memory above baseline_used. A role's figure is None where NVML gave no
    number for it (or it never appeared)."""
    peak: Dict[str, Optional[int]] = {}
    unknown = set()
    max_sum = None
    max_dev = None
    for _, procs, dev in samples:
        per: Dict[str, int] = {}
        for pid, used in procs.items():
            role = roles_of.get(pid, "other")
            if role == "baseline":
                continue
            if used is None:
                unknown.add(role)
                continue
            per[role] = per.get(role, 0) + used
        for role, v in per.items():
            peak[role] = max(peak.get(role) or 0, v)
        if "client" in per or "epkd" in per:
            s = per.get("client", 0) + per.get("epkd", 0)
            max_sum = s if max_sum is None else max(max_sum, s)
        if dev is not None and baseline_used is not None:
            d = dev - baseline_used
            max_dev = d if max_dev is None else max(max_dev, d)
    for role in unknown:
        peak.setdefault(role, None)
    return {
        "client_bytes": peak.get("client"),
        "epkd_bytes": peak.get("epkd"),
        "sum_bytes": max_sum,
        "mps_server_bytes": peak.get("mps-server"),
        "other_bytes": peak.get("other"),
        "device_delta_bytes": max_dev,
        "samples": len(samples),
    }


MEMORY_KEYS = ("client_bytes", "epkd_bytes", "sum_bytes", "mps_server_bytes", "other_bytes", "device_delta_bytes")


def merge_memory(attempts: Sequence[dict]) -> dict:
    """A setup resumed over several calls: each figure's largest value over the attempts (each attempt loads the
    model again, so each peak covers the load as well as the measurements it made)."""
    out = {}
    for k in MEMORY_KEYS:
        vals = [a[k] for a in attempts if a.get(k) is not None]
        out[k] = max(vals) if vals else None
    return out


def gpu_total(res: Optional[dict]) -> Optional[int]:
    """A setup's GPU memory, all its processes: client + epkd from NVML, else the device's used memory above its
    baseline."""
    mem = (res or {}).get("memory") or {}
    if mem.get("sum_bytes") is not None:
        return mem["sum_bytes"]
    return mem.get("device_delta_bytes")


def prefill_median(res: Optional[dict], length: int) -> Optional[float]:
    e = ((res or {}).get("prefill") or {}).get(str(length))
    return e.get("median_ms") if e else None


def _mib(v: Optional[int]) -> str:
    return "n/a" if v is None else f"{v / MIB:.0f}"


def _ms(v: Optional[float]) -> str:
    return "n/a" if v is None else (f"{v:.1f}" if v < 1000 else f"{v:.0f}")


def _logits_text(res: dict) -> str:
    lg = res.get("logits") or {}
    if res.get("setup") == "decompressed":
        return "reference" if lg else "n/a"
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


def format_tables(results: Dict[str, dict], lengths: Sequence[int]) -> str:
    """The prefill table, the generation table and the issue's targets, as markdown."""
    rows = ["| setup | tokens | median ms | runs ms (min-max) | x resident | torch peak MiB | client MiB | epkd MiB "
            "| client+epkd MiB | device used MiB | logits at check length |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    resident = results.get("resident")
    for setup in SETUPS:
        res = results.get(setup)
        if res is None:
            continue
        mem = res.get("memory") or {}
        memcols = (f"{_mib(mem.get('client_bytes'))} | {_mib(mem.get('epkd_bytes'))} | "
                   f"{_mib(mem.get('sum_bytes'))} | {_mib(mem.get('device_delta_bytes'))}")
        note = _status_note(res)
        if setup == "decompressed":
            rows.append(f"| {setup} | {res.get('check_len', '')} | - | - | - | - | {memcols} | {_logits_text(res)}"
                        f"{' (' + note + ')' if note else ''} |")
            continue
        measured = [int(k) for k in (res.get("prefill") or {})]
        shown = [n for n in lengths if n in measured] + sorted(n for n in measured if n not in lengths)
        if not shown:
            rows.append(f"| {setup} | - | {note or 'no prefill measured'} | - | - | - | {memcols} | "
                        f"{_logits_text(res)} |")
            continue
        for n in shown:
            e = res["prefill"][str(n)]
            base = prefill_median(resident, n)
            ratio = f"{e['median_ms'] / base:.2f}x" if base else "n/a"
            spread = f"{_ms(min(e['times_ms']))}-{_ms(max(e['times_ms']))}"
            rows.append(f"| {setup} | {n} | {_ms(e['median_ms'])} | {spread} | {ratio} | "
                        f"{_mib(e.get('torch_max_allocated_bytes'))} | {memcols} | "
                        f"{_logits_text(res)}{' (' + note + ')' if note else ''} |")
    out = ["## Prefill (batch 1, no KV cache, sdpa; torch peak: the client's max_memory_allocated at that length; "
           "NVML columns: peaks over the whole setup, load included)", ""] + rows

    gen = ["| setup | prompt | new tokens | median total ms | ms/token (total/N) | decode ms/token "
           "((total - prefill)/(N-1)) | runs |", "|---|---|---|---|---|---|---|"]
    for setup in GEN_SETUPS:
        res = results.get(setup)
        g = (res or {}).get("generate")
        if not g:
            if res is not None:
                gen.append(f"| {setup} | - | - | {_status_note(res) or 'not measured'} | - | - | - |")
            continue
        n = g["new_tokens"]
        total = g["median_ms"]
        pre = prefill_median(res, g["prompt"])
        decode = f"{(total - pre) / (n - 1):.1f}" if pre is not None and n > 1 else "n/a"
        gen.append(f"| {setup} | {g['prompt']} | {n} | {_ms(total)} | {total / n:.1f} | {decode} | "
                   f"{len(g['times_ms'])} |")
    out += ["", "## Generation (greedy, KV cache)", ""] + gen

    out += ["", "## Targets (issue 14)", ""] + targets(results)
    out += ["", "## Under the GPU memory cap (issue 32)", ""] + capped_targets(results)
    mps = (results.get("epk-daemon-mps") or {}).get("mps")
    if mps is not None:
        held = ((results["epk-daemon-mps"].get("memory") or {}).get("mps_server_bytes"))
        out.append(f"- MPS servers during epk-daemon-mps: {mps.get('servers') or 'none seen (MPS not in use)'}; "
                   f"the server's own GPU memory {_mib(held)} MiB (in the device column, not in client+epkd)")
    acc = (results.get("accelerate") or {}).get("device_map_counts")
    if acc:
        out.append(f"- accelerate: max_memory GPU {_mib((results['accelerate'].get('params') or {}).get('gpu_bytes'))}"
                   f" MiB; modules on the GPU {acc.get('gpu')}, offloaded to the CPU {acc.get('cpu')}")
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
    for s in EPK_SETUPS:
        c = ((results.get(s) or {}).get("logits") or {}).get("vs_decompressed")
        if c and not c.get("missing") and not c.get("error"):
            lines.append(f"- {s} logits bit-equal to the decompressed model's: "
                         f"{'yes' if c.get('equal') else 'NO (max abs diff %.4g)' % c['max_abs_diff']}")
    return lines


def capped_targets(results: Dict[str, dict]) -> List[str]:
    """Issue 32's figures at the cap: epk-client-host against resident and against the BF16 offloader."""
    lines = []
    res, host, off = results.get("resident"), results.get("epk-client-host"), results.get("offload-bf16")
    for s in CAPPED_SETUPS:
        r = results.get(s)
        if r is not None:
            cap = (r.get("params") or {}).get("cap_bytes")
            lines.append(f"- {s}: client+epkd peak {_mib(gpu_total(r))} MiB (cap {_mib(cap)} MiB)"
                         + (f", attachment {json.dumps(r.get('attachment_memory_after_load'))}"
                            if r.get("attachment_memory_after_load") else ""))
    streamed = ((host or {}).get("attachment_memory_after_load") or {}).get("streamed_tier_bytes")
    rate = (host or {}).get("copy_gbs")
    if streamed is not None and rate and prefill_median(res, 1024) is not None:
        bound = streamed / (rate * 1e9) * 1e3 + prefill_median(res, 1024)
        a = prefill_median(host, 1024)
        lines.append(f"- PCIe bound at 1024 tokens: {streamed / 1e9:.2f} GB streamed at {rate:.1f} GB/s + resident's "
                     f"forward = {bound:.1f} ms; epk-client-host "
                     + (f"{a:.1f} ms = {a / bound:.2f}x of it (target 1.1x: {'met' if a / bound <= 1.1 else 'missed'})"
                        if a is not None else "n/a"))
    for n, limit, peer in ((1024, None, 2.5), (4096, 1.15, 1.8), (16384, 1.02, 1.0)):
        a, b, c = prefill_median(host, n), prefill_median(res, n), prefill_median(off, n)
        if a is None:
            lines.append(f"- epk-client-host at {n} tokens: n/a")
            continue
        parts = [f"{a:.1f} ms"]
        if b is not None:
            parts.append(f"{a / b:.3f}x resident" + (f" (target {limit:.2f}x: {'met' if a / b <= limit else 'missed'})"
                                                      if limit else ""))
        if c is not None:
            parts.append(f"{c / a:.2f}x faster than offload-bf16 ({c:.1f} ms; target {peer:.1f}x: "
                         f"{'met' if c / a >= peer else 'missed'})")
        lines.append(f"- epk-client-host at {n} tokens: " + ", ".join(parts))
    gh, go = (host or {}).get("generate"), (off or {}).get("generate")
    if gh and go:
        th, to = gh["median_ms"] / gh["new_tokens"], go["median_ms"] / go["new_tokens"]
        lines.append(f"- generation ms/token: epk-client-host {th:.1f}, offload-bf16 {to:.1f}: {th / to:.2f} of it "
                     f"(target at most 0.33: {'met' if th / to <= 0.34 else 'missed'})")
    return lines


class Work:
    """The work folder's layout."""

    def __init__(self, root):
        self.root = Path(root).resolve()
        self.src = self.root / "src"
        self.epk = self.root / "model.epk"
        self.decompressed = self.root / "decompressed"
        self.results = self.root / "results"
        self.ref = self.root / "ref"
        self.logs = self.root / "logs"

    def result(self, setup: str) -> Path:
        return self.results / f"{setup}.json"

    def ref_logits(self, setup: str, length: int) -> Path:
        return self.ref / f"{setup}_logits_{length}.pt"
