#!/usr/bin/env python3
"""Issue 14's prefill benchmark: a Llama-3-8B-shaped model with random bf16 weights, served six ways on one GPU.

    prefill_bench.py make-model --out DIR [--layers N]   the model (config.json + safetensors shards), built on the GPU
    prefill_bench.py drive --workdir W [--out OUT] ...   every setup in a process of its own, then the tables
    prefill_bench.py table --workdir W                   the tables again from W/results (no GPU needed)
    prefill_bench.py setup --params FILE                 one setup (started by `drive`, never by hand)

The work folder W holds what scripts/gpu/prefill_run.sh's prepare phase made: src/ (make-model's output), model.epk
(`epk compress src --bpp 4 --include-embeddings`) and decompressed/ (`epk decompress`'s model.safetensors beside
src's config.json). `drive` writes W/results/SETUP.json (one per setup, updated after every measurement, so a setup
cut off by the call's time limit resumes where it stopped), W/ref/ (the reference logits), W/logs/, and copies them
with the tables to OUT.

Setups, in the order they run:
  decompressed    the model loaded from `epk decompress`'s output: the reference logits (no timing)
  resident        the source model loaded to the GPU in bf16
  epk-client      epk.torch.load(decode="client"): libepk decodes blocks in this process, prefetching ahead
  epk-daemon      epk.torch.load(decode="daemon", prefetch=2): epkd decodes in its own CUDA context
  epk-daemon-mps  the same under the CUDA MPS control daemon (epkd and the client both its clients)
  accelerate      accelerate's infer_auto_device_map + dispatch_model, GPU max_memory = epk-client's peak
                  (client plus epkd), the rest offloaded to the CPU
Each: the logits at --check-len tokens (all positions) against the references; prefill at each of --lengths (batch 1,
use_cache=False, sdpa, torch.inference_mode, random ids from a fixed seed, only the last position's logits as a
prefill for generation computes them), --warmup untimed runs then the median of --runs (torch.cuda.synchronize
around each); for resident, epk-client and accelerate, greedy generation of --gen-tokens tokens after a
prompt of --gen-prompt tokens, with a KV cache. GPU memory: NVML's per-process figures, sampled every --sample-ms by the
driver (which never creates a CUDA context), for the client and epkd, their largest sum, and the device's used memory
above what it was before the setup started; torch's peak allocation of the client per length.

Only the standard library is imported at module level: the pure parts (attribution of NVML processes, summaries,
tables, epkd's config) and the driver (with a real epkd and a stand-in setup process) are tested without torch or a
GPU (tests/bench/prefill_bench_test.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

SETUPS = ("decompressed", "resident", "epk-client", "epk-daemon", "epk-daemon-mps", "accelerate")
EPK_SETUPS = ("epk-client", "epk-daemon", "epk-daemon-mps")
GEN_SETUPS = ("resident", "epk-client", "accelerate")
REF_SETUPS = ("decompressed", "resident")  # their logits are saved as references
MODEL_NAME = "llama"  # the model's name in epkd's config
MIB = 1 << 20

# Llama-3-8B's shape (issue 14): transformers LlamaConfig fields.
LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
                 rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, tie_word_embeddings=False,
                 bos_token_id=128000, eos_token_id=128001, hidden_act="silu")


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
    """epkd's TOML config (daemon/config.h lists the keys): one model, device 0's pool with budget_mb MiB. `extra`:
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


# ---------------------------------------------------------------------------------------------------------------------
# GPU memory sampling (NVML; the driver never creates a CUDA context)

_NVML_LISTS = (("compute", "nvmlDeviceGetComputeRunningProcesses"),
               ("mps", "nvmlDeviceGetMPSComputeRunningProcesses"),
               ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"))


class Sampler(threading.Thread):
    """Samples device 0's processes (NVML) every `interval_s` until stop()."""

    def __init__(self, interval_s: float):
        super().__init__(daemon=True)
        import pynvml  # nvidia-ml-py

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.interval_s = interval_s
        self.t0 = time.monotonic()
        self.samples: List[Tuple[float, Dict[int, Optional[int]], Optional[int]]] = []
        self.seen: Dict[int, dict] = {}
        self.errors: Dict[str, str] = {}
        self._halt = threading.Event()
        procs = self._procs()
        self.baseline_pids = set(procs)
        self.baseline_used = self._used()
        self._record(procs)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def _used(self) -> Optional[int]:
        try:
            return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)
        except Exception as e:  # noqa: BLE001 - NVML raises its own error classes
            self.errors["memory_info"] = repr(e)
            return None

    def _procs(self) -> Dict[int, Tuple[Optional[int], set]]:
        out: Dict[int, Tuple[Optional[int], set]] = {}
        for list_name, fname in _NVML_LISTS:
            procs = None
            for name in (fname, fname + "_v2"):
                fn = getattr(self.nvml, name, None)
                if fn is None:
                    continue
                try:
                    procs = fn(self.handle)
                    break
                except Exception as e:  # noqa: BLE001
                    self.errors[name] = repr(e)
            for p in procs or ():
                pid = int(p.pid)
                used = p.usedGpuMemory
                used = None if used is None else int(used)
                old_used, lists = out.get(pid, (None, set()))
                lists.add(list_name)
                if old_used is not None and (used is None or old_used > used):
                    used = old_used
                out[pid] = (used, lists)
        return out

    def _record(self, procs) -> None:
        t = self.now()
        for pid, (_, lists) in procs.items():
            s = self.seen.get(pid)
            if s is None:
                name = None
                try:
                    n = self.nvml.nvmlSystemGetProcessName(pid)
                    name = n.decode(errors="replace") if isinstance(n, bytes) else str(n)
                except Exception:  # noqa: BLE001 - another pid namespace, or the process is gone
                    pass
                s = self.seen[pid] = {"first": t, "lists": set(), "name": name}
            s["lists"] |= lists
        self.samples.append((t, {pid: u for pid, (u, _) in procs.items()}, self._used()))

    def run(self) -> None:
        while not self._halt.wait(self.interval_s):
            self._record(self._procs())

    def wait_new_pid(self, timeout_s: float) -> bool:
        """Until a pid not on the GPU at the start shows up (True), or timeout_s passes (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(p not in self.baseline_pids for p in list(self.seen)):
                return True
            time.sleep(self.interval_s)
        return False

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)
        self._record(self._procs())
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass

    def summary(self, roles: Sequence[Tuple[str, int, float]], mps: bool) -> dict:
        seen = {p: dict(s) for p, s in self.seen.items()}
        roles_of = attribute_pids(seen, roles, self.baseline_pids, mps)
        out = summarize_samples(self.samples, roles_of, self.baseline_used)
        peaks: Dict[int, Optional[int]] = {}
        for _, procs, _ in self.samples:
            for pid, used in procs.items():
                if used is not None:
                    peaks[pid] = max(peaks.get(pid) or 0, used)
        out["pids"] = {str(p): {"role": roles_of.get(p), "name": s["name"], "lists": sorted(s["lists"]),
                                "first_s": round(s["first"], 3), "max_bytes": peaks.get(p)}
                       for p, s in seen.items()}
        out["roles"] = [{"role": r, "pid": pid, "started_s": round(t, 3)} for r, pid, t in roles]
        out["baseline_used_bytes"] = self.baseline_used
        out["interval_ms"] = self.interval_s * 1e3
        if self.errors:
            out["nvml_errors"] = dict(self.errors)
        return out


class NoSampler:
    """Stands in where pynvml is missing: every memory figure is then n/a."""

    def __init__(self, why: str):
        self.why = why
        self.t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def wait_new_pid(self, timeout_s: float) -> bool:
        return False

    def summary(self, roles, mps) -> dict:
        return {k: None for k in MEMORY_KEYS} | {"nvml_errors": {"import": self.why}}


def make_sampler(interval_s: float):
    try:
        return Sampler(interval_s)
    except Exception as e:  # noqa: BLE001 - no pynvml, or no NVML on this machine
        return NoSampler(repr(e))


# ---------------------------------------------------------------------------------------------------------------------
# epkd and MPS

def _tail(path, lines: int = 30) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


class Mps:
    """The CUDA MPS control daemon on pipe and log folders of its own (the environment its clients need: env)."""

    def __init__(self, root: Path):
        self.ctl = shutil.which("nvidia-cuda-mps-control")
        if self.ctl is None:
            raise RuntimeError("nvidia-cuda-mps-control is not on PATH: MPS cannot be set up on this machine")
        self.pipe = tempfile.mkdtemp(prefix="mps-pipe-", dir=root)
        self.log = tempfile.mkdtemp(prefix="mps-log-", dir=root)
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": self.pipe, "CUDA_MPS_LOG_DIRECTORY": self.log}
        self.started = False

    def _run(self, args, stdin=None):
        return subprocess.run([self.ctl, *args], input=stdin, env=os.environ | self.env, capture_output=True,
                              text=True, timeout=30)

    def start(self) -> None:
        r = self._run(["-d"])
        if r.returncode != 0:
            raise RuntimeError(f"nvidia-cuda-mps-control -d failed ({r.returncode}): {r.stdout}{r.stderr}")
        self.started = True

    def servers(self) -> str:
        if not self.started:
            return ""
        r = self._run([], stdin="get_server_list\n")
        return (r.stdout + r.stderr).strip()

    def stop(self) -> str:
        if not self.started:
            return ""
        r = self._run([], stdin="quit\n")
        self.started = False
        time.sleep(1.0)  # the server exits after its clients are gone; let it release the GPU before the next setup
        return (r.stdout + r.stderr).strip()


class Epkd:
    """epkd serving W/model.epk with a config file of its own, on a socket in `run_dir`."""

    def __init__(self, binary: str, run_dir: Path, model_path: Path, budget_mb: int, extra: Sequence[str],
                 log_path: Path, env: dict):
        self.socket = str(run_dir / "epkd.sock")
        if len(self.socket) > 100:
            raise RuntimeError(f"socket path too long for AF_UNIX: {self.socket}")
        self.config = run_dir / "epkd.toml"
        self.config.write_text(epkd_config_text(self.socket, str(model_path), budget_mb, extra))
        self.binary = binary
        self.log_path = log_path
        self.env = env
        self.proc: Optional[subprocess.Popen] = None
        r = subprocess.run([binary, "--check-config", str(self.config)], capture_output=True, text=True, env=env,
                           timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"epkd --check-config {self.config} failed ({r.returncode}):\n{r.stdout}{r.stderr}")

    def start(self, timeout_s: float) -> None:
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([self.binary, "--config", str(self.config)], stdout=log,
                                         stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"epkd exited with {self.proc.returncode} before listening:\n"
                                   f"{_tail(self.log_path)}")
            if os.path.exists(self.socket):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.settimeout(2.0)
                    s.connect(self.socket)
                    return
                except OSError:
                    pass
                finally:
                    s.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"epkd did not accept on {self.socket} within {timeout_s:.0f} s:\n"
                                   f"{_tail(self.log_path)}")
            time.sleep(0.05)

    def stop(self) -> Optional[int]:
        """SIGTERM (epkd drains and exits 0), SIGKILL after 60 s. Its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


# ---------------------------------------------------------------------------------------------------------------------
# The driver

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


def setup_done(work: Work, setup: str, check_len: int) -> bool:
    res = load_json(work.result(setup))
    if not res or res.get("status") != "done":
        return False
    return setup not in REF_SETUPS or work.ref_logits(setup, check_len).exists()


def child_params(args, work: Work, setup: str, socket_path: Optional[str]) -> dict:
    p = {
        "setup": setup,
        "workdir": str(work.root),
        "result": str(work.result(setup)),
        "lengths": list(args.lengths),
        "check_len": args.check_len,
        "warmup": args.warmup,
        "runs": args.slow_runs if setup == "accelerate" else args.runs,
        "seed": args.seed,
        "logits_to_keep": args.logits_to_keep,
        "grad_mode": args.grad_mode,
        "socket": socket_path,
        "timing": setup != "decompressed",
        "generate": setup in GEN_SETUPS and args.gen_tokens > 0,
        "gen_prompt": args.gen_prompt,
        "gen_tokens": args.gen_tokens,
        "gen_runs": args.slow_gen_runs if setup == "accelerate" else args.gen_runs,
        "gen_warmup_tokens": min(2, args.gen_tokens) if setup == "accelerate" else args.gen_tokens,
        "prefetch": None,
        "max_decoded_gb": args.max_decoded_gb,
        "decode": None,
        "gpu_bytes": None,
    }
    if setup == "epk-client":
        p["decode"] = "client"
        p["prefetch"] = args.client_prefetch
    elif setup in ("epk-daemon", "epk-daemon-mps"):
        p["decode"] = "daemon"
        p["prefetch"] = args.daemon_prefetch
    return p


def accelerate_gpu_bytes(args, work: Work) -> Tuple[Optional[int], str]:
    if args.accelerate_gpu_mib:
        return args.accelerate_gpu_mib * MIB, "--accelerate-gpu-mib"
    b = gpu_total(load_json(work.result("epk-client")))
    return (b, "epk-client's peak (client + epkd)") if b else (None, "")


def run_one(args, work: Work, setup: str, left_s: float) -> dict:
    """Runs one setup's child (and epkd, and MPS) under the sampler; merges the memory figures into its result."""
    t_start = time.monotonic()
    work.logs.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{setup}-", dir=work.root))
    env = os.environ | {"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    res = load_json(work.result(setup)) or {}
    res["setup"] = setup
    attempt: dict = {"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    mps = epkd = None
    roles: List[Tuple[str, int, float]] = []
    sampler = make_sampler(args.sample_ms / 1e3)
    sampler.start()
    rc = None
    try:
        socket_path = None
        if setup == "epk-daemon-mps":
            mps = Mps(run_dir)
            mps.start()
            env = env | mps.env
        if setup in EPK_SETUPS:
            # epk-client decodes every tier tensor itself: epkd's pool holds only the kept raw tensors (norms).
            budget = args.client_budget_mb if setup == "epk-client" else args.budget_mb
            epkd = Epkd(args.epkd, run_dir, work.epk, budget, args.epkd_setting,
                        work.logs / f"epkd-{setup}.log", env)
            t = sampler.now()
            epkd.start(timeout_s=min(300.0, left_s))
            roles.append(("epkd", epkd.proc.pid, t))
            # The client starts once epkd is on the GPU, so that attribution by order (attribute_pids) holds.
            attempt["epkd_on_gpu"] = sampler.wait_new_pid(10.0)
            socket_path = epkd.socket
        params = child_params(args, work, setup, socket_path)
        if setup == "accelerate":
            params["gpu_bytes"], params["gpu_bytes_from"] = accelerate_gpu_bytes(args, work)
            if params["gpu_bytes"] is None:
                raise RuntimeError("accelerate needs epk-client's peak GPU memory (run epk-client first) or "
                                   "--accelerate-gpu-mib")
        params_path = work.results / f"{setup}.params.json"
        write_json(params_path, params)
        log_path = work.logs / f"{setup}.log"
        with open(log_path, "ab") as log:
            t = sampler.now()
            child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "setup", "--params",
                                      str(params_path)], stdout=log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
            roles.append(("client", child.pid, t))
            timeout = max(10.0, left_s - (time.monotonic() - t_start) - args.margin_s)
            try:
                rc = child.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                rc = "timeout"
        attempt["rc"] = rc
        if mps is not None:
            attempt["mps_servers"] = mps.servers()  # before epkd stops: the server serves while it has clients
        if rc != 0:
            print(f"[drive] {setup}: child {'ran out of time' if rc == 'timeout' else f'exited {rc}'}; "
                  f"its log's tail ({log_path}):\n{_tail(log_path, 25)}", flush=True)
    except Exception as e:  # noqa: BLE001 - the setup fails, the others still run
        attempt["error"] = f"{type(e).__name__}: {e}"
        print(f"[drive] {setup}: {attempt['error']}", flush=True)
    finally:
        if epkd is not None:
            attempt["epkd_rc"] = epkd.stop()
        if mps is not None:
            attempt["mps_quit"] = mps.stop()
        sampler.stop()
        attempt["memory"] = sampler.summary(roles, mps=mps is not None)
        attempt["wall_s"] = round(time.monotonic() - t_start, 1)
        shutil.rmtree(run_dir, ignore_errors=True)
    res = (load_json(work.result(setup)) or res) | {"setup": setup}  # the child's latest write
    res.setdefault("attempts", []).append(attempt)
    res["memory"] = merge_memory([a["memory"] for a in res["attempts"]])
    if "mps_servers" in attempt:
        res["mps"] = {"servers": attempt["mps_servers"]}
    if attempt.get("error"):
        res["status"] = "failed"
        res["error"] = attempt["error"]
    elif rc == "timeout":
        res["status"] = "unfinished (time limit; rerun to resume)"
    elif rc != 0:
        res["status"] = "failed"
        res.setdefault("error", f"the setup's process exited {rc}")
    elif res.get("status") != "done":
        res["status"] = "failed"
        res["error"] = f"the setup's process exited 0 without finishing (status {res.get('status')!r})"
    write_json(work.result(setup), res)
    return res


def collect(work: Work) -> Dict[str, dict]:
    out = {}
    for s in SETUPS:
        r = load_json(work.result(s))
        if r is not None:
            out[s] = r
    return out


def publish(work: Work, out_dir: Optional[Path], table: str, meta: dict) -> None:
    if out_dir is None:
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "prefill_results.json", {"meta": meta, "results": collect(work)})
    (out_dir / "prefill_table.md").write_text(table + "\n")
    for sub in ("results", "logs"):
        src = work.root / sub
        if src.is_dir():
            dst = out_dir / sub
            dst.mkdir(exist_ok=True)
            for f in src.iterdir():
                if f.is_file() and not f.name.endswith(".tmp"):
                    shutil.copy2(f, dst / f.name)


def drive(args) -> int:
    t0 = time.monotonic()
    work = Work(args.workdir)
    for what, p in (("src/config.json", work.src / "config.json"), ("model.epk", work.epk),
                    ("decompressed/config.json", work.decompressed / "config.json")):
        if not p.exists():
            print(f"[drive] {p} is missing ({what}): run scripts/gpu/prefill_run.sh's prepare phase first",
                  file=sys.stderr)
            return 1
    if any(s in EPK_SETUPS for s in args.setups) and not (args.epkd and os.access(args.epkd, os.X_OK)):
        print(f"[drive] epkd not found or not executable: '{args.epkd}' (--epkd or $EPK_EPKD)", file=sys.stderr)
        return 1
    work.results.mkdir(parents=True, exist_ok=True)
    if args.force:
        for s in args.setups:
            work.result(s).unlink(missing_ok=True)
    unfinished = []
    for setup in [s for s in SETUPS if s in args.setups]:
        if setup_done(work, setup, args.check_len):
            print(f"[drive] {setup}: done in an earlier call (results/{setup}.json); --force reruns it", flush=True)
            continue
        left = args.deadline_s - (time.monotonic() - t0)
        if left < args.min_setup_s:
            print(f"[drive] {setup}: not started, {left:.0f} s left of this call's {args.deadline_s:.0f} s", flush=True)
            unfinished.append(setup)
            continue
        print(f"[drive] {setup}: starting ({left:.0f} s left)", flush=True)
        res = run_one(args, work, setup, left)
        mem = res.get("memory") or {}
        print(f"[drive] {setup}: {res.get('status')} after {res['attempts'][-1]['wall_s']} s; GPU MiB client "
              f"{_mib(mem.get('client_bytes'))}, epkd {_mib(mem.get('epkd_bytes'))}, device used "
              f"{_mib(mem.get('device_delta_bytes'))}", flush=True)
        if res.get("status") != "done":
            unfinished.append(setup)
    results = collect(work)
    table = format_tables(results, args.lengths)  # every setup's latest results, earlier calls' too
    meta = {"args": vars(args), "wall_s": round(time.monotonic() - t0, 1),
            "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    publish(work, Path(args.out) if args.out else None, table, meta)
    print()
    print(table)
    if unfinished:
        print(f"\nnot done: {', '.join(unfinished)} (run the same command again to resume; finished setups are kept)")
        return 2
    return 0


def table_cmd(args) -> int:
    work = Work(args.workdir)
    print(format_tables(collect(work), args.lengths))
    return 0


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
    if setup in ("resident", "decompressed"):
        path = work.src if setup == "resident" else work.decompressed
        model = transformers.LlamaForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="sdpa",
                                                              device_map={"": 0})
        return model.eval(), None
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
        model = dispatch_model(model, device_map=device_map,
                               skip_keys=list(getattr(model, "_skip_keys_device_placement", None) or []))
        return model, None
    # epk setups
    import epk
    import epk.torch  # noqa: F401 - registers epk.torch

    res["versions"]["epk"] = getattr(epk, "__version__", "?")
    if p["decode"] == "client":
        lib = os.environ.get("EPK_LIBEPK")
        if not lib or not os.path.isfile(lib):
            raise RuntimeError(f"client-side decode needs EPK_LIBEPK = the path of libepk.so (now: {lib!r})")
    client = epk.Client(p["socket"])
    if not client.has_device_pools:
        raise RuntimeError("epkd serves host pools, not device 0's: it found no usable GPU (see its log)")
    config = transformers.AutoConfig.from_pretrained(work.src)
    config._attn_implementation = "sdpa"
    # None (automatic prefetch depth, no limit on decoded blocks) is load()'s default: left out, not passed.
    kw = {"decode": p["decode"]}
    for k in ("prefetch", "max_decoded_gb"):
        if p[k] is not None:
            kw[k] = p[k]
    res["load_kwargs"] = kw
    model = epk.torch.load(config, client, MODEL_NAME, **kw)
    return model, client


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

    def sync_time(fn) -> float:
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1e3

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

def llama_config(layers: int):
    import transformers

    kw = dict(LLAMA3_8B)
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
    config = llama_config(args.layers)
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
    info = {"layers": args.layers, "parameters": n, "seed": args.seed, "build_s": round(t_build, 2),
            "save_s": round(t_save, 2), "transformers": transformers.__version__, "torch": torch.__version__}
    (out / ".complete").write_text(json.dumps(info) + "\n")
    print(f"make-model: {n / 1e9:.3f} B parameters, {args.layers} layers: built in {t_build:.1f} s, saved to {out} in "
          f"{t_save:.1f} s")
    return 0


# ---------------------------------------------------------------------------------------------------------------------

def _lengths(s: str) -> List[int]:
    try:
        out = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}': expected comma-separated token counts such as 1024,4096")
    if not out or any(n < 1 for n in out):
        raise argparse.ArgumentTypeError(f"'{s}': token counts must be >= 1")
    return out


def _setups(s: str) -> List[str]:
    out = [x.strip() for x in s.split(",") if x.strip()]
    bad = [x for x in out if x not in SETUPS]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"unknown setup(s) {bad}: choose from {', '.join(SETUPS)}")
    return out


def _prefetch(s: str) -> Optional[int]:
    if s == "auto":
        return None
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}': expected auto or a block count")
    if v < 0:
        raise argparse.ArgumentTypeError("prefetch must be >= 0")
    return v


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    mm = sub.add_parser("make-model", help="the random Llama-3-8B-shaped model, saved with save_pretrained")
    mm.add_argument("--out", required=True)
    mm.add_argument("--layers", type=int, default=32)
    mm.add_argument("--seed", type=int, default=0)
    mm.add_argument("--force", action="store_true")

    dr = sub.add_parser("drive", help="run the setups, each in a process of its own, and print the tables")
    dr.add_argument("--workdir", required=True)
    dr.add_argument("--out", default=os.environ.get("OUT"), help="where results and tables are copied ($OUT)")
    dr.add_argument("--setups", type=_setups, default=list(SETUPS))
    dr.add_argument("--lengths", type=_lengths, default=[1024, 4096, 16384])
    dr.add_argument("--check-len", type=int, default=1024, help="tokens of the logits check")
    dr.add_argument("--warmup", type=int, default=1)
    dr.add_argument("--runs", type=int, default=5, help="timed prefill runs per length (median)")
    dr.add_argument("--slow-runs", type=int, default=3, help="timed prefill runs per length for accelerate")
    dr.add_argument("--gen-prompt", type=int, default=1024)
    dr.add_argument("--gen-tokens", type=int, default=32, help="0: no generation")
    dr.add_argument("--gen-runs", type=int, default=3)
    dr.add_argument("--slow-gen-runs", type=int, default=1, help="timed generations for accelerate")
    dr.add_argument("--seed", type=int, default=0)
    dr.add_argument("--logits-to-keep", type=int, default=1,
                    help="positions whose logits a timed prefill computes (1: the last, as generate does; 0: all)")
    dr.add_argument("--grad-mode", choices=("inference", "no_grad"), default="inference")
    dr.add_argument("--budget-mb", type=int, default=4096, help="epkd's device pool budget (daemon-side setups)")
    dr.add_argument("--client-budget-mb", type=int, default=64,
                    help="epkd's device pool budget for epk-client (only the raw tensors: norms)")
    dr.add_argument("--epkd-setting", action="append", default=[], metavar="'KEY = VALUE'",
                    help="a further top-level line of epkd's TOML config (repeatable)")
    dr.add_argument("--client-prefetch", type=_prefetch, default=None, help="epk-client's prefetch (default auto)")
    dr.add_argument("--daemon-prefetch", type=_prefetch, default=2)
    dr.add_argument("--max-decoded-gb", type=float, default=None)
    dr.add_argument("--accelerate-gpu-mib", type=int, default=None,
                    help="accelerate's GPU max_memory instead of epk-client's measured peak")
    dr.add_argument("--epkd", default=os.environ.get("EPK_EPKD"), help="the epkd binary ($EPK_EPKD)")
    dr.add_argument("--sample-ms", type=float, default=20.0)
    dr.add_argument("--deadline-s", type=float, default=560.0, help="this call's time; later setups wait for a rerun")
    dr.add_argument("--min-setup-s", type=float, default=45.0, help="a setup starts only with this much time left")
    dr.add_argument("--margin-s", type=float, default=15.0, help="kept back from a setup's time for cleanup")
    dr.add_argument("--force", action="store_true", help="rerun the selected setups even where results exist")

    tb = sub.add_parser("table", help="print the tables from WORKDIR/results")
    tb.add_argument("--workdir", required=True)
    tb.add_argument("--lengths", type=_lengths, default=[1024, 4096, 16384])

    st = sub.add_parser("setup", help="one setup (the driver starts it)")
    st.add_argument("--params", required=True)
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.cmd == "make-model":
        return make_model(args)
    if args.cmd == "drive":
        if args.check_len < 1 or args.runs < 1 or args.slow_runs < 1 or args.warmup < 0:
            raise SystemExit("--check-len, --runs and --slow-runs must be >= 1, --warmup >= 0")
        if args.gen_tokens and (args.gen_runs < 1 or args.slow_gen_runs < 1 or args.gen_prompt < 1):
            raise SystemExit("--gen-runs, --slow-gen-runs and --gen-prompt must be >= 1")
        return drive(args)
    if args.cmd == "table":
        return table_cmd(args)
    return setup_main(args.params)


if __name__ == "__main__":
    sys.exit(main())
