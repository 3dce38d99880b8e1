"""On the GPU machine (or, slower, on the CPU where torch sees no GPU): calibrated against plain encoding on a real
model, all-MiniLM-L6-v2 (BF16, staged by scripts/gpu/calibration_stage.py). epk-calibrate measures H on CALIB_TEXT; then at each rate `epk compress` writes the
model plain and with --calibration, `epk decompress` restores each, and sentence-transformers embeds held-out
sentences with the original and both restored models; printed: each file's bytes and the embeddings' cosine to the
original's (mean, min), a table last.
Usage: python3 scripts/gpu/calibration_run.py EPK MODEL_DIR CALIB_TEXT EVAL_TEXT OUT [RATES...]"""
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path


def run(cmd):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def main() -> None:
    epk, model, calib_text, eval_text, out = (Path(a) for a in sys.argv[1:6])
    rates = [float(r) for r in sys.argv[6:]] or [2.5, 3.0, 4.0]
    import torch
    import sentence_transformers as st
    from epk.calibrate import calibrate

    device = "cuda" if torch.cuda.is_available() else "cpu"
    out.mkdir(parents=True, exist_ok=True)
    stats = out / "stats.safetensors"
    t0 = time.monotonic()
    calibrate(str(model), str(stats), calib_text.read_text(), samples=128, seq=256, batch=16, device=device)
    print(f"epk-calibrate: {time.monotonic() - t0:.1f} s")
    # Held-out sentences: the eval text's sentences of 6 words or more (none of them in the calibration text).
    calib = calib_text.read_text()
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", eval_text.read_text().replace("\n", " "))]
    sentences = [s for s in sentences if len(s.split()) >= 6 and s not in calib][:256]
    original = st.SentenceTransformer(str(model), device=device)
    with torch.no_grad():
        ref = original.encode(sentences, convert_to_tensor=True).float()
    rows = []
    for rate in rates:
        for calibrated in (False, True):
            name = f"{'cal' if calibrated else 'plain'}_{rate}"
            packed = out / f"{name}.epk"
            cmd = [epk, "compress", model / "model.safetensors", "-o", packed, "--bpp", rate, "--device", "cpu"]
            if calibrated:
                cmd += ["--calibration", stats]
            t = time.monotonic()
            table = run(cmd)
            secs = time.monotonic() - t
            folder = out / name
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(model, folder)
            run([epk, "decompress", packed, "-o", folder / "model.safetensors"])
            m = st.SentenceTransformer(str(folder), device=device)
            with torch.no_grad():
                e = m.encode(sentences, convert_to_tensor=True).float()
            cos = torch.nn.functional.cosine_similarity(e, ref)
            raw = sum(1 for line in table.splitlines() if " raw" in line)
            rows.append((rate, "calibrated" if calibrated else "plain", packed.stat().st_size, cos.mean().item(),
                         cos.min().item(), secs, raw))
            print(f"{name}: {packed.stat().st_size} bytes, cosine mean {cos.mean():.6f} min {cos.min():.6f}, "
                  f"compress {secs:.1f} s", flush=True)
            (out / f"{name}.txt").write_text(table)
    print(f"\n{len(sentences)} held-out sentences; cosine of each model's embeddings to the BF16 original's")
    print("| bpp | encoding | .epk bytes | cosine mean | cosine min | compress s | raw rows |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.6f} | {r[4]:.6f} | {r[5]:.1f} | {r[6]} |")


if __name__ == "__main__":
    main()
