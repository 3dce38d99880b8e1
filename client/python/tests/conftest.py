"""Fixtures for the epk package's tests: the repository's binaries (epkd, epk), a small Llama-shaped model compressed
by `epk compress`, its `epk decompress` outputs (the references), and a real `epkd --cpu` on a temporary socket.

The binaries come from $EPK_BUILD_DIR, else the repository's build/default (scripts/test.sh builds it first), or
from $EPK_EPKD and $EPK_CLI."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import epk_testdata

REPO = Path(__file__).resolve().parents[3]


def _build_dir():
    return Path(os.environ.get("EPK_BUILD_DIR", REPO / "build" / "default"))


@pytest.fixture(scope="session")
def bins():
    b = _build_dir()
    # EPK_EPKD / EPK_CLI: staged binaries (scripts/gpu/python_run.sh) instead of a build folder's.
    out = {"epkd": Path(os.environ.get("EPK_EPKD", b / "daemon" / "epkd")),
           "epk": Path(os.environ.get("EPK_CLI", b / "tools" / "epk" / "epk"))}
    for name, p in out.items():
        if not p.is_file():
            pytest.fail(f"{name} not found at {p}: build the repository first (scripts/build.sh) or set EPK_BUILD_DIR")
    return out


def run(args, **kw):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise AssertionError(f"{args[0]} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def wait_until(pred, what, timeout=10.0):
    """Polls pred() until it holds; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


# Reference outputs of `epk decompress`, per layout name.
DECOMPRESS_ARGS = {
    "dense:bf16": ["--dtype", "bf16"],
    "dense:fp16": ["--dtype", "fp16"],
    "dense:fp32": ["--dtype", "fp32"],
    "rowwise:int8": ["--rowwise", "int8"],
    "rowwise:fp8_e4m3": ["--rowwise", "fp8_e4m3"],
}


@pytest.fixture(scope="session")
def model(bins, tmp_path_factory):
    """{'epk': the .epk path, 'source': {name: entry}, 'ref': {layout: {name: entry}}, 'lattice': the names stored as
    lattice-rans (epk inspect)} (entries as read_safetensors)."""
    d = tmp_path_factory.mktemp("model")
    src = d / "model.safetensors"
    epk_testdata.write_llama_bf16(src)
    path = d / "model.epk"
    # --max-error 0.9: the test model's matrices are tiny (48x64 and the like), and at the default ceiling compress
    # would store most of them raw; these tests are about serving lattice-rans tensors in every layout.
    run([bins["epk"], "compress", src, "-o", path, "--bpp", "4", "--threads", "2", "--max-error", "0.9"])
    ref = {}
    for layout, extra in DECOMPRESS_ARGS.items():
        out = d / (layout.replace(":", "_") + ".safetensors")
        run([bins["epk"], "decompress", path, "-o", out, "--device", "cpu", *extra])
        ref[layout] = epk_testdata.read_safetensors(out)
    info = json.loads(run([bins["epk"], "inspect", "--json", path]).stdout)
    lattice = [t["name"] for t in info["tensors"] if t["encoding"] == "lattice-rans"]
    return {"epk": path, "source": epk_testdata.read_safetensors(src), "ref": ref, "lattice": lattice}


class Daemon:
    """An epkd serving the test model as "test" (and `extra` NAME=FILE.epk models), on a socket in a temporary
    folder: host pools (--cpu) unless cpu=False (then a device pool on every GPU)."""

    def __init__(self, bins, model_path, budget_mb=16, cpu=True, extra=(), args=()):
        self.bins = bins
        self.model_path = model_path
        self.budget_mb = budget_mb
        self.cpu = cpu
        self.extra = list(extra)
        self.args = list(args)
        self.dir = tempfile.mkdtemp(prefix="epkpy")  # short: a socket path has at most 107 bytes
        self.socket = os.path.join(self.dir, "epkd.sock")
        self.log = os.path.join(self.dir, "epkd.log")
        self.proc = None
        self.start()

    def start(self):
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        with open(self.log, "ab") as log:
            cmd = [str(self.bins["epkd"]), "--socket", self.socket, "--model", f"test={self.model_path}",
                   "--budget-mb", str(self.budget_mb), "--threads", "2", "--io-threads", "1", "--log-level", "warn"]
            cmd += ["--cpu"] if self.cpu else []
            for m in self.extra:
                cmd += ["--model", m]
            self.proc = subprocess.Popen(cmd + self.args, stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None:
                raise AssertionError(f"epkd exited with {self.proc.returncode}:\n{open(self.log).read()}")
            if time.monotonic() > deadline:
                raise AssertionError("epkd did not listen within 30 s:\n" + open(self.log).read())
            time.sleep(0.02)

    def stop(self, sig=signal.SIGTERM):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            rc = self.proc.wait(timeout=30)
            if sig == signal.SIGTERM:
                assert rc == 0, f"epkd exited with {rc} after SIGTERM:\n{open(self.log).read()}"
        self.proc = None

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def daemon(bins, model):
    d = Daemon(bins, model["epk"])
    yield d
    d.close()
