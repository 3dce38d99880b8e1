#!/usr/bin/env python3
"""Issue 16's cold-start and attach benchmarks (run by scripts/gpu/coldstart_run.sh).

cold start: seconds from starting epkd until every tensor of the model is servable from the device (epkd listens only
after each model's compressed tier and bf16 decode plans are on the device), from the page cache and with the page
cache dropped for the files, against loading the same model's BF16 safetensors onto the GPU with
safetensors.torch.load_file(device=...), fastsafetensors (nogds) and the Run:ai model streamer, each in a fresh
process. epk also gets a row "+ every tensor decoded once": epkd started, then each tensor acquired as dense:bf16 (a
decode into epkd's pool) and waited for.

attach: epkd already serving a large synthetic model (an existing .epk's layers repeated, bench/coldstart/
replicate_layers.cc); a second process, its CUDA context already made (as an inference process's is), connects and
times its first served tensor and every tensor, through daemon acquires (libepk's C ABI) and through client-side
decode from epkd's compressed tier (epk.stored: open_stored, one plan per layer, decoded on this process's stream).

Subcommands: drive (the whole run, one table at the end), load / epk-acquire-all / attach (one measurement in its
own process, a JSON line on stdout). --device cpu (with epkd --cpu) is the dry run the tests use.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import mmap
import os
import shutil
import socket
import subprocess
import sys
import time
from typing import Dict, List, Optional

# The tables (tests/bench/coldstart_bench_test.py reaches print_tables through this module).
from coldstart_report import LOADERS, print_tables


# ---------------------------------------------------------------------------------------------------------------------
# Page cache

def page_cache_fraction(path: str) -> float:
    """The fraction of `path`'s pages in the page cache (mincore over a shared read-only map)."""
    size = os.path.getsize(path)
    if size == 0:
        return 1.0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return -1.0
        page = mmap.PAGESIZE
        pages = (size + page - 1) // page
        vec = (ctypes.c_ubyte * pages)()
        rc = libc.mincore(ctypes.c_void_p(addr), size, vec)
        libc.munmap(ctypes.c_void_p(addr), size)
        if rc != 0:
            return -1.0
        return sum(b & 1 for b in vec) / pages
    finally:
        os.close(fd)


def drop_page_cache(paths: List[str]) -> None:
    """Evicts the files' pages (fsync, then POSIX_FADV_DONTNEED per file: no root needed, other files untouched)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm_page_cache(paths: List[str]) -> None:
    for p in paths:
        if page_cache_fraction(p) >= 0.999:
            continue
        with open(p, "rb", buffering=0) as f:
            while f.readinto(bytearray(64 << 20)):
                pass


def io_read_bytes(pid: int) -> int:
    """Bytes this process (all its threads) made the storage layer fetch (/proc/PID/io read_bytes), or -1."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


# ---------------------------------------------------------------------------------------------------------------------
# libepk's C ABI (libepk.so.2), enough for acquires

class EpkTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("bytes", ctypes.c_uint64), ("dtype", ctypes.c_uint32),
                ("ndim", ctypes.c_uint32), ("shape", ctypes.c_uint64 * 8), ("strides", ctypes.c_int64 * 8),
                ("handle", ctypes.c_uint64), ("device", ctypes.c_int32), ("on_device", ctypes.c_uint32),
                ("event", ctypes.c_void_p)]


class EpkStats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("budget_bytes", "used_bytes", "pinned_bytes", "slots", "pinned_slots",
                                                "pins", "hits", "misses", "evictions", "decodes", "decode_ns",
                                                "clients", "models", "prefetches", "resident_bytes")]


class Libepk:
    def __init__(self, path: str):
        self.lib = lib = ctypes.CDLL(path)
        vp, cp = ctypes.c_void_p, ctypes.c_char_p
        lib.epk_connect.argtypes = [cp, ctypes.POINTER(vp)]
        lib.epk_last_error.restype = cp
        lib.epk_acquire.argtypes = [vp, cp, cp, cp, ctypes.POINTER(EpkTensor)]
        lib.epk_wait.argtypes = [vp, ctypes.POINTER(EpkTensor), vp]
        lib.epk_release.argtypes = [vp, ctypes.c_uint64]
        lib.epk_release_after.argtypes = [vp, ctypes.c_uint64, vp]
        lib.epk_stats.argtypes = [vp, ctypes.POINTER(EpkStats)]
        lib.epk_disconnect.argtypes = [vp]

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what}: {self.lib.epk_last_error().decode(errors='replace')}")

    def connect(self, sock: str) -> int:
        c = ctypes.c_void_p()
        self.check(self.lib.epk_connect(sock.encode(), ctypes.byref(c)), "epk_connect")
        return c.value

    def stats(self, c: int) -> EpkStats:
        s = EpkStats()
        self.check(self.lib.epk_stats(c, ctypes.byref(s)), "epk_stats")
        return s


def tensor_list(epk_cli: str, path: str) -> List[dict]:
    """`epk inspect --json`: every tensor's name, encoding, shape."""
    out = subprocess.run([epk_cli, "inspect", path, "--json"], check=True, capture_output=True, text=True).stdout
    doc = json.loads(out)
    return doc["tensors"] if isinstance(doc, dict) else doc


def layout_for(t: dict) -> str:
    return "dense:bf16" if t.get("encoding") == "lattice-rans" else "stored"


# ---------------------------------------------------------------------------------------------------------------------
# One measurement per process

def sync_device(torch, device: str) -> None:
    if device != "cpu" and torch is not None:
        torch.cuda.synchronize()


def cmd_load(a) -> None:
    """One loader, in this fresh process: import torch and make the CUDA context first (timed apart), then the load."""
    t0 = time.perf_counter()
    import torch
    dev = "cpu" if a.device == "cpu" else "cuda:0"
    torch.empty(1, device=dev)
    sync_device(torch, a.device)
    t1 = time.perf_counter()
    sd: Dict[str, object] = {}
    keep = []
    if a.loader == "safetensors":
        from safetensors.torch import load_file
        sd = load_file(a.file, device=dev)
    elif a.loader == "fastsafetensors":
        from fastsafetensors import SafeTensorsFileLoader, SingleGroup
        loader = SafeTensorsFileLoader(SingleGroup(), dev, nogds=True)
        loader.add_filenames({0: [a.file]})
        fb = loader.copy_files_to_device()
        sd = {k: fb.get_tensor(k) for k in fb.key_to_rank_lidx}
        keep = [fb, loader]  # the tensors view fb's device buffer
    elif a.loader == "runai":
        from runai_model_streamer import SafetensorsStreamer
        with SafetensorsStreamer() as s:
            s.stream_file(a.file, device=dev)
            for name, t in s.get_tensors():
                sd[name] = t.clone() if dev == "cpu" else t  # on the CPU the streamer reuses its buffers
    else:
        raise SystemExit(f"unknown loader {a.loader}")
    sync_device(torch, a.device)
    t2 = time.perf_counter()
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    on = {str(t.device) for t in sd.values()}
    print(json.dumps({"setup_s": t1 - t0, "load_s": t2 - t1, "tensors": len(sd), "bytes": nbytes,
                      "devices": sorted(on), "read_bytes": io_read_bytes(os.getpid())}), flush=True)
    del keep


def cmd_epk_acquire_all(a) -> None:
    """Every tensor acquired once (lattice-rans ones as dense:bf16, the rest stored), waited for, released."""
    lib = Libepk(a.libepk)
    tensors = json.loads(open(a.tensors).read())
    t0 = time.perf_counter()
    c = lib.connect(a.socket)
    st = lib.stats(c)
    t1 = time.perf_counter()
    out = EpkTensor()
    total = 0
    for t in tensors:
        lib.check(lib.lib.epk_acquire(c, a.model.encode(), t["name"].encode(), layout_for(t).encode(),
                                      ctypes.byref(out)), f"acquire {t['name']}")
        lib.check(lib.lib.epk_wait(c, ctypes.byref(out), None), f"wait {t['name']}")
        total += out.bytes
        lib.check(lib.lib.epk_release(c, out.handle), "release")
    t2 = time.perf_counter()  # epk_wait on a device slot waits on the CPU for the decode's published outcome
    lib.lib.epk_disconnect(c)
    print(json.dumps({"connect_s": t1 - t0, "acquire_all_s": t2 - t1, "tensors": len(tensors), "bytes": total,
                      "models": st.models, "resident_bytes": st.resident_bytes}), flush=True)


def cmd_attach(a) -> None:
    """A second process attaching to a serving epkd: its first tensor and every tensor, both paths."""
    torch = None
    dev = "cpu" if a.device == "cpu" else "cuda:0"
    if a.device != "cpu":  # host pools need no torch (the dry run)
        import torch
        torch.empty(1, device=dev)
        torch.cuda.synchronize()
    tensors = json.loads(open(a.tensors).read())
    lib = Libepk(a.libepk)
    res: Dict[str, object] = {"tensors": len(tensors)}
    stream = None if a.device == "cpu" else ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    # Daemon acquires: the slot decoded by epkd (or cached), mapped in this process through the pool imported at
    # connect.
    t0 = time.perf_counter()
    c = lib.connect(a.socket)
    res["connect_s"] = time.perf_counter() - t0
    out = EpkTensor()
    for i, t in enumerate(tensors):
        lib.check(lib.lib.epk_acquire(c, a.model.encode(), t["name"].encode(), layout_for(t).encode(),
                                      ctypes.byref(out)), f"acquire {t['name']}")
        lib.check(lib.lib.epk_wait(c, ctypes.byref(out), stream), "wait")
        if i == 0:
            sync_device(torch, a.device)
            res["daemon_first_s"] = time.perf_counter() - t0
        lib.check(lib.lib.epk_release_after(c, out.handle, stream), "release")
    sync_device(torch, a.device)
    res["daemon_all_s"] = time.perf_counter() - t0
    lib.lib.epk_disconnect(c)
    if a.device == "cpu":
        res["client_note"] = "client-side decode needs a device pool (skipped on --device cpu)"
    else:
        try:  # the installed package (scripts/gpu/python_run.sh with PY_INSTALL_ONLY=1 builds it in /tmp/epk-pysite)
            import epk
            import epk.stored as stored
        except ImportError as e:
            res["client_note"] = f"client-side decode needs the epk package installed: {e}"
            print(json.dumps(res), flush=True)
            return
        lattice = [t for t in tensors if t.get("encoding") == "lattice-rans"]
        s = torch.cuda.current_stream()
        t0 = time.perf_counter()
        client = epk.Client(a.socket)
        tier = stored.StoredTier(client, a.model, device=0)
        res["client_open_s"] = time.perf_counter() - t0
        # One plan per group of consecutive tensors (a layer's worth), decoded into one reused buffer per group slot.
        group = max(1, a.group)
        sizes = [(tier.decoded_bytes(t["name"], "dense:bf16") + 255) // 256 * 256 for t in lattice]
        buf = torch.empty(max(sum(sizes[i:i + group]) for i in range(0, len(sizes), group)), dtype=torch.uint8,
                          device=dev)
        first = True
        batches = []  # kept until the stream is done: freeing a plan's scratch would synchronise the device
        for i in range(0, len(lattice), group):
            jobs, at = [], 0
            for t, n in zip(lattice[i:i + group], sizes[i:i + group]):
                jobs.append((t["name"], "dense:bf16", buf.data_ptr() + at))
                at += n
            batch = tier.plan(jobs)
            batch.enqueue(s.cuda_stream)
            if first:
                batch.check(s.cuda_stream)
                res["client_first_group_s"] = time.perf_counter() - t0
                first = False
            batches.append(batch)
        torch.cuda.synchronize()
        res["client_all_s"] = time.perf_counter() - t0
        res["client_scratch_bytes"] = sum(b.scratch_bytes for b in batches)
        res["client_tier_bytes"] = tier.tier_bytes
        tier.close()
        client.close()
    print(json.dumps(res), flush=True)


# ---------------------------------------------------------------------------------------------------------------------
# The driver

class Driver:
    def __init__(self, a):
        self.a = a
        self.t_start = time.monotonic()
        self.results: Dict[str, dict] = {}
        os.makedirs(a.out, exist_ok=True)
        self.work = a.work
        os.makedirs(self.work, exist_ok=True)
        self.epkd = os.path.join(a.stage, "epkd", "epkd")
        self.libepk = os.path.join(a.stage, "epkd", "libepk.so.2")
        self.cli = os.path.join(a.stage, "cli", "epk")
        self.replicate = os.path.join(a.stage, "bin", "epk_replicate_layers")
        self.epk_file = os.path.join(a.model_dir, "model.epk")
        st = os.path.join(a.model_dir, "model.safetensors")
        self.st_file = st if os.path.exists(st) else os.path.join(a.model_dir, "decompressed", "model.safetensors")
        for f in (self.epkd, self.cli, self.epk_file, self.st_file):
            if not os.path.exists(f):
                raise SystemExit(f"coldstart: {f} is missing")

    def left(self) -> float:
        return self.a.deadline_s - (time.monotonic() - self.t_start)

    def record(self, key: str, r: dict) -> None:
        self.results[key] = r
        with open(os.path.join(self.a.out, "results.json"), "w") as f:
            json.dump(self.results, f, indent=1)
        print(f"== {key}: {json.dumps(r)}", flush=True)

    def child(self, args: List[str], timeout: float, env: Optional[Dict[str, str]] = None) -> dict:
        t0 = time.perf_counter()
        try:
            p = subprocess.run([sys.executable, __file__] + args, capture_output=True, text=True, timeout=timeout,
                               env=env)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s"}
        wall = time.perf_counter() - t0
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        if p.returncode != 0 or not lines:
            tail = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
            return {"error": f"exit {p.returncode}: {tail[:200]}"}
        r = json.loads(lines[-1])
        r["process_s"] = wall
        return r

    def start_epkd(self, model: str, sock: str, log: str, budget_mb: int, extra: Optional[List[str]] = None):
        if os.path.exists(sock):
            os.unlink(sock)
        args = [self.epkd, "--socket", sock, "--model", f"m={model}", "--budget-mb", str(budget_mb)] + (extra or [])
        args += ["--cpu"] if self.a.device == "cpu" else ["--devices", "0"]
        t0 = time.perf_counter()
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
        ready = None
        while time.perf_counter() - t0 < max(10.0, self.left()):
            if p.poll() is not None:
                break
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(sock)  # epkd listens only once every model's tier and plans are on the device
                ready = time.perf_counter() - t0
                break
            except OSError:
                time.sleep(0.002)
            finally:
                s.close()
        return p, ready, io_read_bytes(p.pid)

    @staticmethod
    def stop_epkd(p) -> None:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def coldstart_epk(self, cache: str, tensors_json: str, uring: bool = False) -> None:
        key = f"{'epk-uring' if uring else 'epk'}/{cache}"
        if self.left() < 20:
            return self.record(key, {"error": "skipped: out of time"})
        self.set_cache(cache, [self.epk_file])
        frac = page_cache_fraction(self.epk_file)
        sock = os.path.join(self.work, "cold.sock")
        log = os.path.join(self.a.out, f"epkd_{key.replace('/', '_')}.log")
        p, ready, rb = self.start_epkd(self.epk_file, sock, log, self.a.budget_mb,
                                       ["--resident-compressed"] if uring else None)
        r = {"cached_at_start": frac, "ready_s": ready, "read_bytes": rb, "file_bytes": os.path.getsize(self.epk_file)}
        if ready is None:
            r["error"] = "epkd did not start: " + (open(log).read().strip().splitlines() or ["?"])[-1][:200]
        else:
            acq = self.child(["epk-acquire-all", "--libepk", self.libepk, "--socket", sock, "--model", "m",
                              "--tensors", tensors_json], timeout=max(10.0, self.left() - 5))
            r["acquire_all"] = acq
        self.stop_epkd(p)
        self.record(key, r)

    def cudart_env(self) -> Dict[str, str]:
        """fastsafetensors dlopens "libcudart.so" (no version): where torch's wheels bring only libcudart.so.N, a link
        under that name in a folder on LD_LIBRARY_PATH (read at process start) lets it find the runtime."""
        env = dict(os.environ)
        if self.a.device == "cpu":
            return env
        dirs = ["/usr/local/cuda/lib64"]
        if not os.path.exists("/usr/local/cuda/lib64/libcudart.so"):
            import glob
            import site
            found = []
            for sp in site.getsitepackages() + [site.getusersitepackages()] + sys.path:
                found += glob.glob(os.path.join(sp, "nvidia", "cuda_runtime", "lib", "libcudart.so.*"))
                found += glob.glob(os.path.join(sp, "nvidia", "cu*", "lib", "libcudart.so.*"))
                found += glob.glob(os.path.join(sp, "torch", "lib", "libcudart*.so*"))
            if found:
                link_dir = os.path.join(self.work, "cudart")
                os.makedirs(link_dir, exist_ok=True)
                link = os.path.join(link_dir, "libcudart.so")
                if os.path.lexists(link):
                    os.unlink(link)
                os.symlink(sorted(found)[-1], link)
                dirs.insert(0, link_dir)
        env["LD_LIBRARY_PATH"] = ":".join(dirs + [env.get("LD_LIBRARY_PATH", "")]).rstrip(":")
        return env

    def coldstart_loader(self, loader: str, cache: str) -> None:
        key = f"{loader}/{cache}"
        if self.left() < 20:
            return self.record(key, {"error": "skipped: out of time"})
        self.set_cache(cache, [self.st_file])
        frac = page_cache_fraction(self.st_file)
        r = self.child(["load", "--loader", loader, "--file", self.st_file, "--device", self.a.device],
                       timeout=max(10.0, min(self.a.loader_timeout_s, self.left() - 5)),
                       env=self.cudart_env() if loader == "fastsafetensors" else None)
        r["cached_at_start"] = frac
        r["file_bytes"] = os.path.getsize(self.st_file)
        self.record(key, r)

    def set_cache(self, cache: str, files: List[str]) -> None:
        if cache == "dropped":
            drop_page_cache(files)
        else:
            warm_page_cache(files)

    def attach(self) -> None:
        if self.left() < 40:
            return self.record("attach", {"error": "skipped: out of time"})
        path = self.a.attach_model
        layers = self.a.attach_layers
        if not path:
            path = os.path.join(self.work, "attach.epk")
            src_bytes = os.path.getsize(self.epk_file)
            if layers == 0:
                # The largest that fits: the free disk (less 8 GB of room), and half the memory for its page cache
                # (epkd reads it through a map), and the GPU's memory for its tier (less 16 GB).
                free = shutil.disk_usage(self.work).free + (os.path.getsize(path) if os.path.exists(path) else 0)
                mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                cap = min(free - (8 << 30), mem // 2, self.a.attach_max_gb << 30)
                layers = max(1, int(cap / (src_bytes / self.a.src_layers)))
            stamp = f"{self.epk_file}:{os.path.getmtime(self.epk_file)}:{layers}"
            if not (os.path.exists(path) and open(path + ".stamp").read() == stamp if os.path.exists(path + ".stamp")
                    else False):
                if not os.path.exists(self.replicate):
                    return self.record("attach", {"error": f"{self.replicate} is missing (stage.sh)"})
                t0 = time.perf_counter()
                subprocess.run([self.replicate, self.epk_file, "-o", path, "--layers", str(layers)], check=True,
                               stdout=subprocess.DEVNULL)
                open(path + ".stamp", "w").write(stamp)
                print(f"== attach model: {layers} layers, {os.path.getsize(path) / 1e9:.1f} GB written in "
                      f"{time.perf_counter() - t0:.1f} s", flush=True)
        tensors = tensor_list(self.cli, path)
        tj = os.path.join(self.work, "attach_tensors.json")
        with open(tj, "w") as f:
            json.dump(tensors, f)
        sock, log = os.path.join(self.work, "attach.sock"), os.path.join(self.a.out, "epkd_attach.log")
        p, ready, rb = self.start_epkd(path, sock, log, self.a.attach_budget_mb)
        r = {"layers": layers, "file_bytes": os.path.getsize(path), "tensors": len(tensors), "epkd_ready_s": ready,
             "params": sum(_numel(t) for t in tensors)}
        if ready is None:
            r["error"] = "epkd did not start: " + (open(log).read().strip().splitlines() or ["?"])[-1][:200]
        else:
            r.update(self.child(["attach", "--libepk", self.libepk, "--socket", sock, "--model", "m", "--tensors", tj,
                                 "--device", self.a.device, "--tree", self.a.tree],
                                timeout=max(10.0, self.left() - 5)))
        self.stop_epkd(p)
        self.record("attach", r)

    def run(self) -> int:
        tensors = tensor_list(self.cli, self.epk_file)
        tj = os.path.join(self.work, "tensors.json")
        with open(tj, "w") as f:
            json.dump(tensors, f)
        only = set(self.a.only.split(",")) if self.a.only else None
        for cache in ("warm", "dropped"):
            if only is None or "epk" in only:
                self.coldstart_epk(cache, tj)
            if only is None or "epk-uring" in only:
                self.coldstart_epk(cache, tj, uring=True)
            for loader in LOADERS:
                if only is None or loader in only:
                    self.coldstart_loader(loader, cache)
        if only is None or "attach" in only:
            self.attach()
        print_tables(self.results)
        return 0


def _numel(t: dict) -> int:
    n = 1
    for d in t.get("shape", []):
        n *= int(d)
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("drive")
    d.add_argument("--stage", required=True)
    d.add_argument("--model-dir", required=True, help="holds model.epk and model.safetensors (or decompressed/)")
    d.add_argument("--out", required=True)
    d.add_argument("--work", default="/tmp/epk-coldstart")
    d.add_argument("--tree", default=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
    d.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    d.add_argument("--budget-mb", type=int, default=4096)
    d.add_argument("--deadline-s", type=float, default=280)
    d.add_argument("--loader-timeout-s", type=float, default=90)
    d.add_argument("--only", default="", help="comma list of epk,epk-uring,safetensors,fastsafetensors,runai,attach")
    d.add_argument("--attach-model", default="", help="an existing .epk for the attach run (else one is written)")
    d.add_argument("--attach-layers", type=int, default=0, help="0: the largest that fits")
    d.add_argument("--attach-max-gb", type=int, default=100)
    d.add_argument("--attach-budget-mb", type=int, default=8192)
    d.add_argument("--src-layers", type=int, default=32, help="decoder layers of model.epk (sizes the attach model)")
    ld = sub.add_parser("load")
    ld.add_argument("--loader", required=True, choices=LOADERS)
    ld.add_argument("--file", required=True)
    ld.add_argument("--device", default="cuda")
    ea = sub.add_parser("epk-acquire-all")
    at = sub.add_parser("attach")
    for p in (ea, at):
        p.add_argument("--libepk", required=True)
        p.add_argument("--socket", required=True)
        p.add_argument("--model", required=True)
        p.add_argument("--tensors", required=True)
    at.add_argument("--device", default="cuda")
    at.add_argument("--tree", required=True)
    at.add_argument("--group", type=int, default=7, help="tensors per client-side plan (a Llama layer's 7 linears)")
    a = ap.parse_args()
    if a.cmd == "drive":
        return Driver(a).run()
    {"load": cmd_load, "epk-acquire-all": cmd_epk_acquire_all, "attach": cmd_attach}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
