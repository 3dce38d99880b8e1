"""Perplexity of a transformers causal LM on a text: exp of the mean next-token negative log-likelihood over
consecutive windows of `window` tokens (stride = window, so every token is scored once, with the context of its own
window only; the first token of each window is context, not scored). Runs in F32 on the CPU whatever the checkpoint's
dtype, so every model of a table is evaluated with the same arithmetic."""
import math
from typing import Dict, Sequence


def windows(ids: Sequence[int], window: int, max_windows: int) -> list:
    """The first `max_windows` full windows of `window` tokens (a shorter tail is dropped, so every window has the same
    length and every model sees the same tokens)."""
    n = min(len(ids) // window, max_windows)
    return [list(ids[i * window:(i + 1) * window]) for i in range(n)]


def perplexity(model_dir: str, chunks: list, batch: int = 4) -> Dict[str, float]:
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    nll, count = 0.0, 0
    with torch.no_grad():
        for b in range(0, len(chunks), batch):
            x = torch.tensor(chunks[b:b + batch], dtype=torch.long)
            logits = model(input_ids=x, use_cache=False).logits[:, :-1].float()
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                                     reduction="sum")
            nll += float(loss)
            count += x[:, 1:].numel()
    return {"ppl": math.exp(nll / count), "nll": nll / count, "tokens": count}
