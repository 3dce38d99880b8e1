"""Small committed test vectors for the GPU decoder (tests/data/cuda/*.epkraw), made with the reference package's
CPU (eager) backend. Run: /opt/refvenv/bin/python scripts/testdata/make_cuda_vectors.py tests/data/cuda"""
import pathlib
import sys

import entropack as ep
import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import epkraw  # noqa: E402

ALL = ["fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"]


def case(out_dir, name, w, bpp, names=ALL):
    cfg = ep.LatticeRANSConfig(target_bpp=bpp, execution_backend="eager")
    ct = ep.compress(w, cfg)
    assert ct.compress_method == "lattice_rans", name
    decoded = ep.decompress(ct, cfg)
    rows, cols = w.shape
    if w.dtype == torch.bfloat16:
        outputs = {"bf16": decoded}  # the reference's native bf16 store
    else:
        outputs = epkraw.reference_outputs(decoded, names)
    path = out_dir / f"{name}.epkraw"
    epkraw.write(path, ct, rows, cols, outputs)
    print(path, path.stat().st_size, "bytes; layout", ct.buffers["layout"].tolist())


def main():
    out_dir = pathlib.Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(99)
    g = torch.Generator().manual_seed(1234)
    w = torch.randn(29, 520, generator=g)
    for bpp in (2, 4, 8):
        case(out_dir, f"gauss_29x520_{bpp}bpp", w, float(bpp))
    # Heavy tails stretch the alphabets (wider tables, an int8 gain below one).
    t = torch.distributions.StudentT(torch.tensor(2.5)).sample((16, 1024)) * 0.02
    case(out_dir, "studentt_16x1024_4bpp", t, 4.0)
    case(out_dir, "studentt_16x1024_8bpp", t, 8.0, ["fp32", "bf16"])
    case(out_dir, "gauss_bf16_31x264_4bpp", (torch.randn(31, 264, generator=g) * 0.05).to(torch.bfloat16), 4.0)
    # Columns not a multiple of 8: padded_cols > cols.
    case(out_dir, "gauss_13x100_4bpp", torch.randn(13, 100, generator=g), 4.0, ["fp32", "bf16"])


if __name__ == "__main__":
    main()
