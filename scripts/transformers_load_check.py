"""Loads a model folder whose model.safetensors `epk decompress` wrote with the transformers that is importable, and
prints the file's metadata and dtypes, the model's dtype and a checksum of its hidden states for two sentences (so
that two transformers versions, or a decompressed file and its source, can be compared by eye).

Usage: python3 scripts/transformers_load_check.py DIR   (DIR: config.json, tokenizer files, model.safetensors)
For transformers 4.x beside a 5.x install: pip install --target T "transformers<5" "huggingface_hub<1" "tokenizers<0.23",
then PYTHONPATH=T python3 scripts/transformers_load_check.py DIR."""
import sys

import torch
import transformers
from safetensors import safe_open


def main(d):
    with safe_open(f"{d}/model.safetensors", "pt") as f:
        meta = f.metadata()
        dtypes = sorted({str(f.get_slice(k).get_dtype()) for k in f.keys()})
    model = transformers.AutoModel.from_pretrained(d).eval()
    tok = transformers.AutoTokenizer.from_pretrained(d)
    x = tok(["A man is eating food.", "Das ist ein Satz auf Deutsch."], return_tensors="pt", padding=True)
    with torch.no_grad():
        h = model(**x).last_hidden_state
    print(f"transformers {transformers.__version__}: {d} loads; metadata {dict(sorted(meta.items()))}; "
          f"dtypes {dtypes}; model dtype {model.dtype}; hidden-state sum {h.double().sum().item():.6f}")


if __name__ == "__main__":
    main(sys.argv[1])
