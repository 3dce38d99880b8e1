"""On the GPU machine: compresses synthetic bf16 weights with the reference package's CUDA backend, writes them as
.epkraw (with the reference's own bf16 decode for the bit-exact check) and times the reference's CUDA decoder on each
(CUDA events, median after warm-up), writing ref_times.txt ("name microseconds" per line) for gpu_decode_bench.

Usage: python3 make_bench_streams.py OUT_DIR [--only NAME[,NAME...]]
(--only: just those cases; the weights of every case are still drawn in order, so a case's data is the same either
way.)
"""
import pathlib
import sys
import time

import torch
import entropack as ep

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "testdata"))
import epkraw  # noqa: E402

CASES = [  # name, rows, cols, target bpp, time the reference decoder
    ("l10240x3840_4bpp", 10240, 3840, 4.0, True),
    ("l10240x3840_2bpp", 10240, 3840, 2.0, True),
    ("l10240x3840_8bpp", 10240, 3840, 8.0, True),
    ("q4096x4096_4bpp", 4096, 4096, 4.0, True),
    ("up14336x4096_4bpp", 14336, 4096, 4.0, True),
    ("k1024x4096_4bpp", 1024, 4096, 4.0, False),
    ("v1024x4096_4bpp", 1024, 4096, 4.0, False),
    ("o4096x4096_4bpp", 4096, 4096, 4.0, False),
    ("gate14336x4096_4bpp", 14336, 4096, 4.0, False),
    ("down4096x14336_4bpp", 4096, 14336, 4.0, False),
]


def time_decode(ct, cfg, runs=50, warmup=5):
    for _ in range(warmup):
        ep.decompress(ct, cfg)
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        ep.decompress(ct, cfg)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    times.sort()
    return times[len(times) // 2]


def main():
    out_dir = pathlib.Path(sys.argv[1])
    only = None
    if "--only" in sys.argv:
        at = sys.argv.index("--only")
        if at + 1 >= len(sys.argv) or not sys.argv[at + 1]:
            sys.exit("--only needs a comma-separated list of case names: " + ",".join(c[0] for c in CASES))
        only = set(sys.argv[at + 1].split(","))
        unknown = only - {c[0] for c in CASES}
        if unknown:
            sys.exit("--only: unknown case(s) " + ",".join(sorted(unknown)))
    out_dir.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator(device="cuda").manual_seed(2026)
    lines = []
    print(f"{'tensor':22s} {'stored_bpp':>10s} {'pb':>3s} {'tile_sym':>8s} {'compress_s':>10s} {'ref_decode_us':>13s}")
    for name, rows, cols, bpp, timed in CASES:
        w = (torch.randn(rows, cols, device="cuda", generator=gen) * 0.02).to(torch.bfloat16)
        if only is not None and name not in only:
            continue
        cfg = ep.LatticeRANSConfig(target_bpp=bpp)
        t0 = time.time()
        ct = ep.compress(w, cfg)
        torch.cuda.synchronize()
        secs = time.time() - t0
        assert ct.compress_method == "lattice_rans", (name, ct.compress_method)
        decoded = ep.decompress(ct, cfg)
        assert decoded.dtype == torch.bfloat16
        bufs = ct.buffers
        stored = sum(v.numel() * v.element_size() for v in bufs.values()) * 8 / (rows * cols)
        ref_us = time_decode(ct, cfg) if timed else 0.0
        layout = bufs["layout"].tolist()
        print(f"{name:22s} {stored:10.3f} {layout[1]:3d} {layout[2]:8d} {secs:10.2f} {ref_us:13.1f}", flush=True)
        if timed:
            lines.append(f"{name} {ref_us:.3f}\n")
        epkraw.write(out_dir / f"{name}.epkraw", ct, rows, cols, {"bf16": decoded} if timed else {})
        del ct, decoded, w
        torch.cuda.empty_cache()
    # With --only, the reference times of cases not made this time stay as an earlier run wrote them.
    times = out_dir / "ref_times.txt"
    if only is not None and times.exists():
        kept = [ln for ln in times.read_text().splitlines(keepends=True) if ln.split() and ln.split()[0] not in only]
        lines = kept + lines
    times.write_text("".join(lines))


if __name__ == "__main__":
    main()
