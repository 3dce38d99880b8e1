#!/usr/bin/env python3
"""Issue 14's and 32's prefill benchmark: a Llama-3-8B- (or 70B-) shaped model with random bf16 weights, served
several ways on one GPU, some under GPU memory caps.

    prefill_bench.py make-model --out DIR [--shape 8b|70b] [--layers N] [--config-only]
                                                         the model (config.json + safetensors shards), built on the GPU
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
  epk-client-host epkd keeps the tier in its host tier (tier_budget_mb = 0); the client maps it and decodes under
                  max_gpu_gb = cap - headroom; run once per --cap-gb cap (results/epk-client-host_capCAP.json)
  epk-daemon-host epk-daemon with tier_budget_mb = 0: epkd decodes every miss on the GPU from its host tier (each
                  tensor's compressed bytes copied first); its GPU memory is epkd's pool (--budget-mb) and the
                  client's, whatever the cap: run once, judged against each cap
  offload-bf16    the BF16 prefetching offloader (prefill_offload.py); its GPU memory does not depend on the cap: run
                  once, its peak judged against each cap
  nf4             bitsandbytes NF4 (blocksize 64, BF16 compute) from decompressed/; run once, judged against each cap
  fit-bf16        random resident BF16 models of --fit-layers layers of src/config.json's shape, timed: a line in the
                  layer count gives compute-only for a shape too large to keep resident (the 70B); not by default
  accelerate      accelerate's infer_auto_device_map + dispatch_model, GPU max_memory = epk-client's peak
                  (client plus epkd), or with --cap-gb the cap's share (cap - headroom) at each cap, the rest
                  offloaded to the CPU
When decompressed/ holds fewer layers than src/config.json names (the 70B: epk_replicate_layers repeated k encoded
layers), the decompressed model is src's shape with layer l tied to decoded layer l mod k: what the .epk computes,
all weights resident; --time-decompressed times it as compute-only.
Each: the logits at --check-len tokens (all positions) against the references; prefill at each of --lengths (batch 1,
use_cache=False, sdpa, torch.inference_mode, random ids from a fixed seed, only the last position's logits as a
prefill for generation computes them), --warmup untimed runs then the median of --runs (torch.cuda.synchronize
around each); for GEN_SETUPS (prefill_report), greedy generation of --gen-tokens tokens after a
prompt of --gen-prompt tokens, with a KV cache. GPU memory: NVML's per-process figures, sampled every --sample-ms by the
driver (which never creates a CUDA context), for the client and epkd, their largest sum, and the device's used memory
above what it was before the setup started; torch's peak allocation of the client per length.

Only the standard library is imported at module level: the pure parts (attribution of NVML processes, summaries,
tables, epkd's config) and the driver (with a real epkd and a stand-in setup process) are tested without torch or a
GPU (tests/bench/prefill_bench_test.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

# The pure parts (tested on their own by tests/bench/prefill_bench_test.py), the sampler and the torch side live beside
# this file.
from prefill_report import (DEFAULT_SETUPS, EPK_SETUPS, GEN_SETUPS, HOST_TIER_SETUPS, MIB, REF_SETUPS, SETUPS, Work,
                            _mib, epkd_config_text, gpu_total, key_order, load_json, merge_memory, run_key, split_key,
                            write_json)
from prefill_tables import format_tables
from prefill_sampler import make_sampler
from prefill_setup import make_model, setup_main


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

def setup_done(work: Work, key: str, check_len: int) -> bool:
    res = load_json(work.result(key))
    if not res or res.get("status") != "done":
        return False
    setup = split_key(key)[0]
    return setup not in REF_SETUPS or work.ref_logits(setup, check_len).exists()


def caps(args) -> List[float]:
    """The caps (GiB) of this call: --cap-gb's, else the one default cap of 6 GiB."""
    return list(args.cap_gb) if args.cap_gb else [6.0]


def headroom(args, cap: float) -> float:
    """What a capped run leaves of `cap` beside its weights (activations, CUDA contexts, epkd): one value for every
    cap, or one per cap in --cap-gb's order."""
    h = args.cap_headroom_gb
    return h[0] if len(h) == 1 else h[caps(args).index(cap)]


def capped_by_run(args, setup: str) -> bool:
    """Whether `setup` runs once per cap: epk-client-host always; accelerate when --cap-gb is given (without it,
    accelerate gets epk-client's peak, issue 14's comparison)."""
    return setup == "epk-client-host" or (setup == "accelerate" and bool(args.cap_gb))


def plan(args) -> List[Tuple[str, Optional[float]]]:
    """(setup, cap or None) in the order they run: SETUPS' order, a setup run per cap at each cap, smallest first."""
    out: List[Tuple[str, Optional[float]]] = []
    for setup in [s for s in SETUPS if s in args.setups]:
        if capped_by_run(args, setup):
            out += [(setup, c) for c in sorted(caps(args))]
        else:
            out.append((setup, None))
    return out


def child_params(args, work: Work, setup: str, socket_path: Optional[str], cap: Optional[float] = None) -> dict:
    key = run_key(setup, cap)
    p = {
        "setup": setup,
        "key": key,
        "cap_gb": cap,
        "workdir": str(work.root),
        "result": str(work.result(key)),
        "lengths": list(args.lengths),
        "check_len": args.check_len,
        "warmup": args.warmup,
        "runs": args.slow_runs if setup == "accelerate" else args.runs,
        "seed": args.seed,
        "logits_to_keep": args.logits_to_keep,
        "grad_mode": args.grad_mode,
        "socket": socket_path,
        # The decompressed model is timed where it is the compute-only reference (--time-decompressed: the 70B shape,
        # which has no resident BF16 model).
        "timing": setup != "decompressed" or args.time_decompressed,
        "generate": (setup in GEN_SETUPS or (setup == "decompressed" and args.time_decompressed))
                    and args.gen_tokens > 0,
        "fit_layers": list(args.fit_layers),
        "gen_prompt": args.gen_prompt,
        "gen_tokens": args.gen_tokens,
        "gen_runs": args.slow_gen_runs if setup == "accelerate" else args.gen_runs,
        "gen_warmup_tokens": min(2, args.gen_tokens) if setup == "accelerate" else args.gen_tokens,
        "prefetch": None,
        "max_decoded_gb": args.max_decoded_gb,
        "max_gpu_gb": None,
        "cap_bytes": None,
        "decode": None,
        "gpu_bytes": None,
    }
    if setup in ("epk-client", "epk-client-host"):
        p["decode"] = "client"
        p["prefetch"] = args.client_prefetch
    if cap is not None:
        p["cap_bytes"] = int(cap * 2**30)
        p["headroom_gb"] = headroom(args, cap)
        if setup == "epk-client-host":
            p["max_gpu_gb"] = cap - p["headroom_gb"]
    if setup in ("epk-daemon", "epk-daemon-mps", "epk-daemon-host"):
        p["decode"] = "daemon"
        p["prefetch"] = args.daemon_prefetch
    return p


def accelerate_gpu_bytes(args, work: Work, cap: Optional[float] = None) -> Tuple[Optional[int], str]:
    if cap is not None:
        # The same share of the cap as epk-client-host's attachment gets: the rest is left to activations and the
        # CUDA context.
        h = headroom(args, cap)
        return int((cap - h) * 2**30), f"the cap's share: {cap:g} GiB - {h:g} GiB headroom"
    if args.accelerate_gpu_mib:
        return args.accelerate_gpu_mib * MIB, "--accelerate-gpu-mib"
    b = gpu_total(load_json(work.result("epk-client")))
    return (b, "epk-client's peak (client + epkd)") if b else (None, "")


def run_one(args, work: Work, setup: str, left_s: float, cap: Optional[float] = None) -> dict:
    """Runs one setup's child (and epkd, and MPS) under the sampler; merges the memory figures into its result."""
    t_start = time.monotonic()
    key = run_key(setup, cap)
    work.logs.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{setup}-", dir=work.root))
    env = os.environ | {"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    res = load_json(work.result(key)) or {}
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
            budget = args.client_budget_mb if setup in ("epk-client", "epk-client-host") else args.budget_mb
            # The host-tier setups: epkd keeps none of the tier on the GPU (the model is larger than its share).
            settings = args.epkd_setting + (["tier_budget_mb = 0"] if setup in HOST_TIER_SETUPS else [])
            epkd = Epkd(args.epkd, run_dir, work.epk, budget, settings, work.logs / f"epkd-{key}.log", env)
            t = sampler.now()
            epkd.start(timeout_s=min(300.0, left_s))
            roles.append(("epkd", epkd.proc.pid, t))
            # The client starts once epkd is on the GPU, so that attribution by order (attribute_pids) holds.
            attempt["epkd_on_gpu"] = sampler.wait_new_pid(10.0)
            socket_path = epkd.socket
        params = child_params(args, work, setup, socket_path, cap)
        if params["max_gpu_gb"] is not None and params["max_gpu_gb"] <= 0:
            raise RuntimeError(f"the cap {cap:g} GiB minus the headroom {params['headroom_gb']:g} GiB leaves no GPU "
                               f"memory for the weights (--cap-headroom-gb)")
        if setup == "accelerate":
            params["gpu_bytes"], params["gpu_bytes_from"] = accelerate_gpu_bytes(args, work, cap)
            if params["gpu_bytes"] is None:
                raise RuntimeError("accelerate needs epk-client's peak GPU memory (run epk-client first) or "
                                   "--accelerate-gpu-mib")
        params_path = work.results / f"{key}.params.json"
        write_json(params_path, params)
        log_path = work.logs / f"{key}.log"
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
            print(f"[drive] {key}: child {'ran out of time' if rc == 'timeout' else f'exited {rc}'}; "
                  f"its log's tail ({log_path}):\n{_tail(log_path, 25)}", flush=True)
    except Exception as e:  # noqa: BLE001 - the setup fails, the others still run
        attempt["error"] = f"{type(e).__name__}: {e}"
        print(f"[drive] {key}: {attempt['error']}", flush=True)
    finally:
        if epkd is not None:
            attempt["epkd_rc"] = epkd.stop()
        if mps is not None:
            attempt["mps_quit"] = mps.stop()
        sampler.stop()
        attempt["memory"] = sampler.summary(roles, mps=mps is not None)
        attempt["wall_s"] = round(time.monotonic() - t_start, 1)
        shutil.rmtree(run_dir, ignore_errors=True)
    res = (load_json(work.result(key)) or res) | {"setup": setup, "cap_gb": cap}  # the child's latest write
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
    write_json(work.result(key), res)
    return res


def collect(work: Work) -> Dict[str, dict]:
    """Every run's result in W/results (run key -> result), earlier calls' too, in the order they run."""
    out = {}
    if not work.results.is_dir():
        return out
    for f in work.results.glob("*.json"):
        if f.name.endswith(".params.json") or split_key(f.stem)[0] not in SETUPS:
            continue
        r = load_json(f)
        if r is not None:
            out[f.stem] = r
    return dict(sorted(out.items(), key=lambda kv: key_order(kv[0])))


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
    todo = plan(args)
    if args.force:
        for s, c in todo:
            work.result(run_key(s, c)).unlink(missing_ok=True)
    unfinished = []
    for setup, cap in todo:
        key = run_key(setup, cap)
        if setup_done(work, key, args.check_len):
            print(f"[drive] {key}: done in an earlier call (results/{key}.json); --force reruns it", flush=True)
            continue
        left = args.deadline_s - (time.monotonic() - t0)
        if left < args.min_setup_s:
            print(f"[drive] {key}: not started, {left:.0f} s left of this call's {args.deadline_s:.0f} s", flush=True)
            unfinished.append(key)
            continue
        print(f"[drive] {key}: starting ({left:.0f} s left)", flush=True)
        res = run_one(args, work, setup, left, cap)
        mem = res.get("memory") or {}
        print(f"[drive] {key}: {res.get('status')} after {res['attempts'][-1]['wall_s']} s; GPU MiB client "
              f"{_mib(mem.get('client_bytes'))}, epkd {_mib(mem.get('epkd_bytes'))}, device used "
              f"{_mib(mem.get('device_delta_bytes'))}", flush=True)
        if res.get("status") != "done":
            unfinished.append(key)
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


def _gib_list(s: str, distinct: bool) -> List[float]:
    try:
        out = [float(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}': expected comma-separated GiB such as 4,6,8,12")
    if not out or any(v <= 0 for v in out):
        raise argparse.ArgumentTypeError(f"'{s}': GiB must be > 0")
    if distinct and len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"'{s}': each cap once")
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
    mm.add_argument("--shape", choices=("8b", "70b"), default="8b", help="Llama-3-8B's or -70B's shape")
    mm.add_argument("--layers", type=int, default=32)
    mm.add_argument("--config-only", action="store_true", help="config.json only (no weights)")
    mm.add_argument("--seed", type=int, default=0)
    mm.add_argument("--force", action="store_true")

    dr = sub.add_parser("drive", help="run the setups, each in a process of its own, and print the tables")
    dr.add_argument("--workdir", required=True)
    dr.add_argument("--out", default=os.environ.get("OUT"), help="where results and tables are copied ($OUT)")
    dr.add_argument("--setups", type=_setups, default=list(DEFAULT_SETUPS))
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
    dr.add_argument("--cap-gb", type=lambda s: _gib_list(s, distinct=True), default=None,
                    help="the GPU memory caps (GiB, comma-separated: a sweep) of the capped setups (issue 32): "
                         "epk-client-host and accelerate run once per cap, offload-bf16 and nf4 once, judged at each; "
                         "default 6 for epk-client-host, accelerate then uncapped")
    dr.add_argument("--cap-headroom-gb", type=lambda s: _gib_list(s, distinct=False), default=[2.0],
                    help="what a capped run leaves of the cap beside its weights (activations, CUDA contexts, epkd): "
                         "one value, or one per cap")
    dr.add_argument("--time-decompressed", action="store_true",
                    help="time the decompressed model too (prefill, generation): compute-only for the 70B shape")
    dr.add_argument("--fit-layers", type=_lengths, default=[10, 20],
                    help="fit-bf16's layer counts (random resident BF16 models; a line in the count)")
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
        if args.cap_gb and len(args.cap_headroom_gb) not in (1, len(args.cap_gb)):
            raise SystemExit("--cap-headroom-gb: one value, or one per --cap-gb cap")
        if len(set(args.fit_layers)) < 2:
            raise SystemExit("--fit-layers: at least two distinct layer counts (a line needs two points)")
        return drive(args)
    if args.cmd == "table":
        return table_cmd(args)
    return setup_main(args.params)


if __name__ == "__main__":
    sys.exit(main())
