"""Issue 30's perplexity table on the CPU: a causal LM (staged by smollm_stage.py) original, epk plain and calibrated
at each rate, NF4 (4.5 bpp), GPTQ (4-bit, group 128, act-order: 4.25 bpp) with epk's calibration statistics, and
GPTQ's quantizer without feedback (rtn, 4.25 bpp).

Steps, each result kept in OUT/results.json so that a rerun skips what is done (delete it to start over):
  1. the calibration text (CALIB files concatenated) and the held-out evaluation text (EVAL files) into OUT;
  2. epk-calibrate (epk.calibrate.calibrate, on the CPU) -> OUT/stats.safetensors;
  3. perplexity of the original; of `epk compress --bpp R [--calibration STATS] --device cpu` then `epk decompress`
     at each rate (with --budget also `--budget-bpp R --calibration STATS`: per-layer rates by the output-error
     model, rows "epk calibrated-budget R"); of NF4, GPTQ and RTN (baselines.py) on the same tensors;
  4. the table (markdown) on stdout.
Needs torch, transformers, safetensors and the epk Python package (for epk.calibrate) importable.

Usage: python3 scripts/calibration/smollm_ppl.py EPK MODEL_DIR OUT [--rates 4.0 3.5 3.0] [--budget] [--calib F...]
       [--eval F...] [--profile reference|native]
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import baselines  # noqa: E402
import perplexity  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CALIB = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "decisions").glob("*.md"))
EVAL = ["README.md", "docs/SECURITY.md", "docs/PROTOCOL.md"]


def run(cmd) -> str:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout + r.stderr


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("epk")
    p.add_argument("model_dir", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--rates", type=float, nargs="+", default=[4.0, 3.5, 3.0])
    p.add_argument("--calib", nargs="+", default=CALIB, help="calibration text files (repository-relative)")
    p.add_argument("--eval", nargs="+", default=EVAL, help="held-out evaluation text files")
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--window", type=int, default=512)
    p.add_argument("--max-windows", type=int, default=1000)
    p.add_argument("--profile", choices=["reference", "native"], default="reference",
                   help="the stream profile epk compress writes (rows of the native profile are named '... native')")
    p.add_argument("--budget", action="store_true",
                   help="also epk --budget-bpp R --calibration STATS (rows 'epk calibrated-budget R')")
    a = p.parse_args()
    out, model = a.out, a.model_dir
    out.mkdir(parents=True, exist_ok=True)
    if set(a.calib) & set(a.eval):
        sys.exit(f"calibration and evaluation share files: {sorted(set(a.calib) & set(a.eval))}")
    calib_text = "\n\n".join((ROOT / f).read_text() for f in a.calib)
    eval_text = "\n\n".join((ROOT / f).read_text() for f in a.eval)
    (out / "calib.txt").write_text(calib_text)
    (out / "eval.txt").write_text(eval_text)

    results_path = out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}

    def save():
        results_path.write_text(json.dumps(results, indent=1))

    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(str(model))
    chunks = perplexity.windows(tok(eval_text, add_special_tokens=False)["input_ids"], a.window, a.max_windows)
    print(f"eval: {len(chunks)} windows of {a.window} tokens", flush=True)

    def score(name, folder, **extra):
        if name in results:
            return
        t = time.monotonic()
        r = perplexity.perplexity(str(folder), chunks)
        r.update(extra, eval_secs=time.monotonic() - t)
        results[name] = r
        save()
        print(f"{name}: {r}", flush=True)

    score("original", model)
    stats = out / "stats.safetensors"
    if "calibrate_secs" not in results:
        from epk.calibrate import calibrate
        t = time.monotonic()
        calibrate(str(model), str(stats), calib_text, samples=a.samples, seq=a.seq, batch=4, device="cpu")
        results["calibrate_secs"] = time.monotonic() - t
        save()
    for rate in a.rates:
        variants = ["plain", "calibrated"] + (["calibrated-budget"] if a.budget else [])
        for variant in variants:
            name = f"epk {variant} {rate}" + (" native" if a.profile == "native" else "")
            if name in results:
                continue
            packed = out / f"{name.replace(' ', '_')}.epk"
            cmd = [a.epk, "compress", model / "model.safetensors", "-o", packed, "--device", "cpu",
                   "--profile", a.profile]
            cmd += ["--budget-bpp" if variant == "calibrated-budget" else "--bpp", rate]
            if variant != "plain":
                cmd += ["--calibration", stats]
            t = time.monotonic()
            log = run(cmd)
            secs = time.monotonic() - t
            (out / f"{packed.stem}.txt").write_text(log)
            # compress's total line: "encoded N weights in X MiB = B bpp", the stored average over encoded tensors
            stored = re.search(r"encoded \d+ weights in [\d.]+ \w+ = ([\d.]+) bpp", log)
            folder = out / packed.stem
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(model, folder)
            run([a.epk, "decompress", packed, "-o", folder / "model.safetensors"])
            score(name, folder, bpp=rate, stored_bpp=float(stored.group(1)) if stored else None,
                  epk_bytes=packed.stat().st_size, compress_secs=secs)
            shutil.rmtree(folder)
        if rate == a.rates[0]:
            for method, bpp in (("nf4", 4.5), ("gptq", 4.25), ("rtn", 4.25)):
                if method in results:
                    continue
                folder = out / method
                info = baselines.write_baseline(model, folder, method, stats if method == "gptq" else None)
                score(method, folder, bpp=bpp, quantize_secs=info["secs"], tensors=info["tensors"])
                shutil.rmtree(folder)

    base = results["original"]["ppl"]
    print(f"\n{results['original']['tokens']} scored tokens; perplexity increase against the original ({base:.4f})")
    print("| method | bpp | perplexity | increase | notes |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        if not isinstance(r, dict):
            continue
        notes = ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()
                          if k not in ("ppl", "nll", "tokens", "bpp"))
        print(f"| {name} | {r.get('bpp', 'BF16')} | {r['ppl']:.4f} | {r['ppl'] - base:+.4f} | {notes} |")


if __name__ == "__main__":
    main()
