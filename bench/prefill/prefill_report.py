"""The prefill benchmark's pure parts (bench/prefill/prefill_bench.py): its setups and run keys, results' JSON, the
attribution of NVML's processes to roles, memory summaries and epkd's config text (the tables and targets:
prefill_tables.py). Only the standard library: tested without torch or a GPU (tests/bench/prefill_bench_test.py)."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Dict, Iterable, Optional, Sequence, Tuple

SETUPS = ("decompressed", "resident", "epk-client", "epk-daemon", "epk-daemon-mps", "epk-client-host",
          "epk-daemon-host", "offload-bf16", "nf4", "fit-bf16", "accelerate")
# What `drive` runs without --setups: every setup but fit-bf16, which only the 70B shape needs (its compute-only line).
DEFAULT_SETUPS = tuple(s for s in SETUPS if s != "fit-bf16")
EPK_SETUPS = ("epk-client", "epk-daemon", "epk-daemon-mps", "epk-client-host", "epk-daemon-host")
# Setups whose epkd keeps the model's tier in its host tier (tier_budget_mb = 0: none of it on the GPU).
HOST_TIER_SETUPS = ("epk-client-host", "epk-daemon-host")
GEN_SETUPS = ("resident", "epk-client", "accelerate", "epk-client-host", "epk-daemon-host", "offload-bf16", "nf4")
# Setups under the GPU memory cap (issue 32): epk-client-host (epkd keeps the tier in its host tier; the client keeps
# what its limit leaves on the GPU and streams the rest from there), epk-daemon-host (epkd decodes every acquire on the
# GPU from its host tier, copying each tensor's compressed bytes first), the streaming peer (the BF16 prefetching
# offloader), bitsandbytes NF4 and, when --cap-gb is given, accelerate's CPU offload.
CAPPED_SETUPS = ("epk-client-host", "epk-daemon-host", "offload-bf16", "nf4", "accelerate")
# Those that take the cap as a parameter run once per cap; the others' GPU memory does not depend on it (the
# offloader keeps the embedding, the head and two block slots; NF4 keeps the whole model), so they run once and their
# peak is judged against each cap.
CAP_RUN_SETUPS = ("epk-client-host", "accelerate")
STREAMING_SETUPS = ("epk-client-host", "offload-bf16")  # they copy over PCIe every forward: the copy rate is measured
REF_SETUPS = ("decompressed", "resident")  # their logits are saved as references
MODEL_NAME = "llama"  # the model's name in epkd's config
MIB = 1 << 20

# ---------------------------------------------------------------------------------------------------------------------
# Pure helpers (no torch, no NVML)

def median(xs: Sequence[float]) -> float:
    if not xs:
        raise ValueError("median of no values")
    return float(statistics.median(xs))


def run_key(setup: str, cap_gb: Optional[float] = None) -> str:
    """The name of one run's result (and of its files): the setup, and for a setup run once per cap, the cap in GiB
    (epk-client-host_cap6, accelerate_cap12.5). Letters, digits, '-', '_' and '.' only: the device tool returns no
    file whose name holds anything else."""
    return setup if cap_gb is None else f"{setup}_cap{cap_gb:g}"


def split_key(key: str) -> Tuple[str, Optional[float]]:
    setup, _, cap = key.partition("_cap")
    return setup, (float(cap) if cap else None)


def key_order(key: str) -> Tuple[int, float]:
    setup, cap = split_key(key)
    return (SETUPS.index(setup) if setup in SETUPS else len(SETUPS), cap or 0.0)


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
