"""The cold-start benchmark's tables (bench/coldstart/coldstart_bench.py): each loader's time and bytes read per
page-cache state, the ratios against the best loader, and epk's attach figures beside the quoted vLLM anchor."""

from __future__ import annotations

from typing import Dict, Optional

LOADERS = ("safetensors", "fastsafetensors", "runai")
VLLM_ANCHOR = "vLLM weight-cache daemon, per-tensor CUDA IPC handles: 1.3 s for Qwen3-235B FP8 (quoted, not measured)"


def _f(x: Optional[float], digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def print_tables(res: Dict[str, dict]) -> None:
    rows = []
    best: Dict[str, float] = {}
    for cache in ("warm", "dropped"):
        for loader in LOADERS:
            r = res.get(f"{loader}/{cache}", {})
            if "load_s" in r:
                best[cache] = min(best.get(cache, float("inf")), r["load_s"])
    for cache in ("warm", "dropped"):
        for key, name in (("epk", "epk map"), ("epk-uring", "epk uring")):
            e = res.get(f"{key}/{cache}")
            if e is None:
                continue
            acq = e.get("acquire_all", {})
            rows.append((f"{name}: tier resident", cache, e.get("ready_s"), e.get("ready_s"), e.get("read_bytes"),
                         e.get("file_bytes"), e.get("cached_at_start"), e.get("error")))
            all_s = None if e.get("ready_s") is None or "acquire_all_s" not in acq else \
                e["ready_s"] + acq["acquire_all_s"]
            rows.append((f"{name}: + all decoded once", cache, all_s, None, None, None, None, acq.get("error")))
        for loader in LOADERS:
            r = res.get(f"{loader}/{cache}")
            if r is None:
                continue
            rows.append((loader, cache, r.get("load_s"), r.get("process_s"), r.get("read_bytes"), r.get("file_bytes"),
                         r.get("cached_at_start"), r.get("error")))
    print("\nCold start: seconds to a usable model on the GPU (loaders: the load call, CUDA context made before; epk: "
          "from starting epkd, its CUDA setup included; map: the file mapped, uring: --resident-compressed).\n"
          "ratio: the best non-epk loader's seconds / this row's. read GB: /proc/PID/io read_bytes.")
    print(f"{'loader':34} {'cache':8} {'usable s':>9} {'process s':>9} {'read GB':>8} {'file GB':>8} {'cached':>7} "
          f"{'ratio':>6}")
    for name, cache, s, proc, rb, fb, frac, err in rows:
        ratio = "-" if s is None or cache not in best or s <= 0 else f"{best[cache] / s:.2f}x"
        line = (f"{name:34} {cache:8} {_f(s):>9} {_f(proc):>9} {_f(None if rb is None or rb < 0 else rb / 1e9):>8} "
                f"{_f(None if fb is None else fb / 1e9):>8} {_f(None if frac is None else 100 * frac, 0):>7} "
                f"{ratio:>6}")
        print(line + (f"  [{err}]" if err else ""))
    a = res.get("attach")
    if a:
        print("\nAttach: a second process (CUDA context made) attaching to an epkd that already serves the model")
        if "error" in a and "connect_s" not in a:
            print(f"  error: {a['error']}")
        else:
            print(f"  model: {a.get('layers')} layers, {a.get('tensors')} tensors, {a.get('params', 0) / 1e9:.1f} B "
                  f"params, {a.get('file_bytes', 0) / 1e9:.1f} GB .epk; epkd ready in {_f(a.get('epkd_ready_s'))} s")
            print(f"  {'path':44} {'first tensor s':>14} {'every tensor s':>14}")
            print(f"  {'daemon acquires (decode in epkd, bf16)':44} {_f(a.get('daemon_first_s'), 4):>14} "
                  f"{_f(a.get('daemon_all_s')):>14}")
            if "client_all_s" in a:
                print(f"  {'client-side decode (epk.stored, open_stored)':44} "
                      f"{_f(a.get('client_first_group_s'), 4):>14} {_f(a.get('client_all_s')):>14}"
                      f"   (tier mapped in {_f(a.get('client_open_s'), 3)} s)")
            elif a.get("client_note"):
                print(f"  client-side decode: {a['client_note']}")
            if a.get("error"):
                print(f"  error: {a['error']}")
        print(f"  anchor: {VLLM_ANCHOR}")
