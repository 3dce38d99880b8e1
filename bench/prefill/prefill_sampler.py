"""GPU memory sampling for the prefill benchmark's driver (bench/prefill/prefill_bench.py): NVML's per-process
figures on device 0 every few milliseconds, from a thread that never creates a CUDA context."""

from __future__ import annotations

import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

from prefill_report import MEMORY_KEYS, attribute_pids, summarize_samples

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
