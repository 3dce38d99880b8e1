#!/usr/bin/env python3
"""epkd's Prometheus metrics, parsed by prometheus_client's own text parser (PyPI), not by code written here.

Usage: metrics_exposition_test.py EPKD EPK. Starts epkd with --metrics-listen on a Unix socket and on 127.0.0.1:0,
decodes one tensor through `epk get`, scrapes both endpoints and checks names (Prometheus' naming guide), types and
values. Exit 77 (skipped) when prometheus_client is not installed (scripts/setup.sh puts it in .venv).
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("prometheus_client is not installed (scripts/setup.sh installs it into .venv)")
    sys.exit(77)

EPKD, EPK = sys.argv[1], sys.argv[2]
BUDGET = 1 << 20
T0_BYTES = 256 * 256 * 4  # t0: 256x256 fp32


def http_get_unix(path, target="/metrics"):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(path)
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: epkd\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    headers = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
    assert int(headers[b"Content-Length"]) == len(body), head
    return status, headers, body.decode()


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams, family, sample_name, **labels):
    for s in fams[family].samples:
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise AssertionError(f"no sample {sample_name}{labels} in {family}")


def check_names(fams):
    for name, f in fams.items():
        assert name.startswith("epkd_"), name
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", name), name
        assert f.type in ("gauge", "counter", "histogram"), (name, f.type)
        assert f.documentation, name
        for s in f.samples:
            if f.type == "counter":
                assert s.name == name + "_total", s.name  # counters end in _total
            if "bytes" in name:
                assert name.endswith("_bytes"), name  # the base unit as the last word
    for must in ("epkd_build_info", "epkd_models", "epkd_clients", "epkd_pool_budget_bytes", "epkd_pool_used_bytes",
                 "epkd_pool_pinned_bytes", "epkd_pool_resident_bytes", "epkd_pool_slots", "epkd_pool_pins",
                 "epkd_cache_hits", "epkd_cache_misses", "epkd_cache_evictions", "epkd_prefetches", "epkd_decodes",
                 "epkd_model_cached_bytes", "epkd_decode_duration_seconds"):
        assert must in fams, (must, sorted(fams))


def main():
    tmp = tempfile.mkdtemp(prefix="epkd_metrics_")
    proc = None
    try:
        sock, msock, log = (os.path.join(tmp, n) for n in ("epkd.sock", "metrics.sock", "epkd.log"))
        with open(log, "w") as logf:
            proc = subprocess.Popen([EPKD, "--socket", sock, "--budget-mb", "1", "--cpu", "--synthetic",
                                     'm"x=t0:256x256,t1:16x16', "--metrics-listen", msock], stderr=logf)
        deadline = time.time() + 10
        while not os.path.exists(msock) or not os.path.exists(sock):
            assert time.time() < deadline and proc.poll() is None, open(log).read()
            time.sleep(0.02)
        status, headers, text = http_get_unix(msock)
        assert status == 200, status
        assert headers[b"Content-Type"].startswith(b"text/plain; version=0.0.4"), headers
        fams = families(text)
        check_names(fams)
        assert value(fams, "epkd_pool_budget_bytes", "epkd_pool_budget_bytes", pool="0", device="host") == BUDGET
        assert value(fams, "epkd_pool_used_bytes", "epkd_pool_used_bytes", pool="0", device="host") == 0
        assert value(fams, "epkd_models", "epkd_models") == 1
        assert [s.labels["version"] for s in fams["epkd_build_info"].samples][0], fams["epkd_build_info"]
        # The model name carries a double quote: escaped in the text, read back whole by the parser.
        assert value(fams, "epkd_model_tensors", "epkd_model_tensors", model='m"x') == 2

        out = subprocess.run([EPK, "get", "--socket", sock, 'm"x', "t0", "-o", os.path.join(tmp, "t0.safetensors")],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        # The snapshot is refreshed once a second: wait for the decode to show.
        deadline = time.time() + 5
        while True:
            fams = families(http_get_unix(msock)[2])
            if value(fams, "epkd_decodes", "epkd_decodes_total") == 1 or time.time() > deadline:
                break
            time.sleep(0.1)
        assert value(fams, "epkd_decodes", "epkd_decodes_total") == 1
        assert value(fams, "epkd_cache_misses", "epkd_cache_misses_total", pool="0", device="host") == 1
        # epk get acquires each tensor twice (its shape, then its bytes): one miss, then one hit.
        assert value(fams, "epkd_cache_hits", "epkd_cache_hits_total", pool="0", device="host") == 1
        assert value(fams, "epkd_pool_used_bytes", "epkd_pool_used_bytes", pool="0", device="host") == T0_BYTES
        assert value(fams, "epkd_pool_slots", "epkd_pool_slots", pool="0", device="host") == 1
        assert value(fams, "epkd_model_cached_bytes", "epkd_model_cached_bytes", model='m"x') == T0_BYTES
        h = fams["epkd_decode_duration_seconds"]
        buckets = [(s.labels["le"], s.value) for s in h.samples if s.name.endswith("_bucket")]
        assert buckets[0][0] in ("1e-05", "1e-5") and buckets[-1][0] == "+Inf", buckets
        assert len(buckets) == 17, buckets
        counts = [v for _, v in buckets]
        assert counts == sorted(counts) and counts[-1] == 1, buckets  # cumulative
        assert value(fams, "epkd_decode_duration_seconds", "epkd_decode_duration_seconds_count") == 1
        assert 0 < value(fams, "epkd_decode_duration_seconds", "epkd_decode_duration_seconds_sum") < 1

        status, _, _ = http_get_unix(msock, "/")
        assert status == 404, status
        status, _, _ = http_get_unix(msock, "/metrics?name=x")
        assert status == 200, status
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 0
            assert not os.path.exists(os.path.join(tmp, "metrics.sock"))  # removed at exit

    # 127.0.0.1, a port chosen at bind and logged.
    try:
        sock, log = os.path.join(tmp, "epkd2.sock"), os.path.join(tmp, "epkd2.log")
        with open(log, "w") as logf:
            proc = subprocess.Popen([EPKD, "--socket", sock, "--budget-mb", "2", "--cpu", "--synthetic", "m=t0:8x8",
                                     "--metrics-listen", "127.0.0.1:0"], stderr=logf)
        deadline = time.time() + 10
        port = None
        while port is None:
            assert time.time() < deadline and proc.poll() is None, open(log).read()
            m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", open(log).read())
            port = int(m.group(1)) if m else None
            time.sleep(0.02)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            fams = families(r.read().decode())
        check_names(fams)
        assert value(fams, "epkd_pool_budget_bytes", "epkd_pool_budget_bytes", pool="0") == 2 << 20
        try:
            urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/metrics", method="POST", data=b""),
                                   timeout=5)
            raise AssertionError("POST was answered")
        except urllib.error.HTTPError as e:
            assert e.code == 405, e.code
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
