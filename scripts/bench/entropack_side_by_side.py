#!/opt/refvenv/bin/python
"""Side-by-side figures for the codec benchmark: dumps the 2-D linear weights of a safetensors checkpoint as raw
float32 files for bench/codec_bench (--input) and runs the reference package (eager CPU backend) on each at the given
targets, printing one TSV line per tensor and target: name rows cols target ref_stored_bpp ref_relL2 ref_encode_cpu_s.

  scripts/bench/entropack_side_by_side.py MODEL.safetensors OUT_DIR [--targets 4] [--no-reference]

OUT_DIR/list.tsv gets "path rows cols name" lines. Embeddings, norms and biases are skipped.
"""
import argparse
import os
import time

import torch
from safetensors.torch import load_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--targets", default="4")
    ap.add_argument("--no-reference", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tensors = load_file(args.model)
    names = [n for n, t in tensors.items() if t.ndim == 2 and "embeddings" not in n and n.endswith("weight")]
    with open(os.path.join(args.out, "list.tsv"), "w") as lst:
        for n in sorted(names):
            w = tensors[n].float().contiguous()
            path = os.path.join(args.out, n.replace("/", "_") + ".f32")
            w.numpy().tofile(path)
            lst.write(f"{path} {w.shape[0]} {w.shape[1]} {n}\n")
    if args.no_reference:
        return
    import entropack as ep
    torch.set_num_threads(1)
    print("name\trows\tcols\ttarget\tref_bpp\tref_relL2\tref_encode_cpu_s")
    for n in sorted(names):
        w = tensors[n].float().contiguous()
        for target in (float(t) for t in args.targets.split(",")):
            cfg = ep.LatticeRANSConfig(target_bpp=target, execution_backend="eager")
            c0 = time.process_time()
            ct = ep.compress(w, cfg)
            c1 = time.process_time()
            out = ep.decompress(ct, cfg)
            err = float((out - w).norm() / w.norm())
            print(f"{n}\t{w.shape[0]}\t{w.shape[1]}\t{target}\t{ct.actual_bpp:.5f}\t{err:.6f}\t{c1 - c0:.2f}", flush=True)


if __name__ == "__main__":
    main()
