"""epk-calibrate: the calibration statistics `epk compress --calibration` reads (docs/FORMAT.md 12), measured by
running a transformers model on text.

    epk-calibrate MODEL_DIR -o STATS.safetensors --text FILE [--samples N] [--seq L] [--batch B]
                  [--device cuda|cpu] [--include-embeddings]

The text is tokenized once and cut into N consecutive sequences of L tokens (a shorter last one is padded, and its
padding masked out). A forward pre-hook on every nn.Linear whose weight `epk compress` encodes sums H = x x^T of the
layer's inputs in F32 (on the model's device) and counts the tokens; the file is keyed by the checkpoint's tensor
names (the safetensors headers in MODEL_DIR), so that `epk compress MODEL_DIR --calibration STATS` finds them.

The model is loaded as the class config.json's architectures names, whole on the device (the GPU when there is
one) when its weights fit what the device has free (--max-memory-gb sets that budget instead); a larger model is
calibrated block by block: accelerate places what does not fit in host memory, then in a temporary folder on disk,
and moves each block's weights to the device while that block runs (needs accelerate).
torch and transformers are needed here only; the rest of the package does not import them."""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO

import numpy as np

from ._calibration import HessianAccumulator, TensorInfo, checkpoint_files, checkpoint_key, checkpoint_tensors
from ._calibration import statistics_tensors
from ._calibration import why_not_encoded
from ._safetensors import write_safetensors


def _need(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError as e:
        raise SystemExit(f"epk-calibrate: needs {module} ({e}); install it (pip install {module})") from None


class LinearHooks:
    """Forward pre-hooks on the nn.Linear layers of `model` whose weights the checkpoint `tensors` ({name: (dtype,
    shape)}) holds and `epk compress` encodes, accumulating each weight's H.

    Set `mask` (bool [batch, seq], False at padding) before each forward: an input with batch * seq rows is masked
    by it; an input with another row count (a layer that sees a subset of the tokens, such as a routed expert) is
    taken whole. Linears sharing one weight (tied) share one accumulator: H is then the sum over both uses, the
    weight's output error over both. A linear whose weight matches no checkpoint tensor, or one of another shape,
    is an error naming it: the statistics would not reach compress. Each H is summed on `device` (default: where
    the layer's weight is; a model loaded block by block keeps its offloaded weights on the meta device)."""

    def __init__(self, model: Any, tensors: Dict[str, TensorInfo], include_embeddings: bool = False,
                 log: Optional[Callable[[str], None]] = None, device: Optional[Any] = None):
        torch = _need("torch")
        log = log or (lambda s: None)
        self.mask: Optional[Any] = None
        self.layers: Dict[str, HessianAccumulator] = {}
        self.skipped: Dict[str, str] = {}
        self._hooks: List[Any] = []
        # Every qualified name of each parameter: a tied weight's checkpoint key may be under its other name.
        names_of: Dict[int, List[str]] = {}
        for n, p in model.named_parameters(remove_duplicate=False):
            names_of.setdefault(id(p), []).append(n)
        keys = list(tensors)
        try:
            for mname, mod in model.named_modules():
                if not isinstance(mod, torch.nn.Linear):
                    continue
                qname = f"{mname}.weight" if mname else "weight"
                key = None
                for n in [qname] + [n for n in names_of.get(id(mod.weight), []) if n != qname]:
                    key = checkpoint_key(n, keys)
                    if key is not None:
                        break
                if key is None:
                    raise ValueError(f"linear '{mname}' ({qname}): no tensor of the checkpoint matches its weight")
                dtype, shape = tensors[key]
                want = (mod.out_features, mod.in_features)
                if tuple(shape) != want:
                    raise ValueError(f"linear '{mname}': checkpoint tensor '{key}' has shape {list(shape)}, the "
                                     f"layer's weight {list(want)}")
                why = why_not_encoded(key, dtype, shape, include_embeddings)
                if why is not None:
                    self.skipped[key] = why
                    log(f"{key}: no statistics ({why}: epk compress stores it raw)")
                    continue
                acc = self.layers.get(key)
                if acc is None:
                    where = device if device is not None else mod.weight.device
                    h0 = torch.zeros((mod.in_features, mod.in_features), dtype=torch.float32, device=where)
                    acc = self.layers[key] = HessianAccumulator(mod.in_features, h0)
                self._hooks.append(mod.register_forward_pre_hook(self._hook(acc)))
        except BaseException:
            self.close()
            raise
        # Checkpoint order: the file lists the weights as the checkpoint does.
        order = {k: i for i, k in enumerate(keys)}
        self.layers = dict(sorted(self.layers.items(), key=lambda kv: order[kv[0]]))

    def _hook(self, acc: HessianAccumulator) -> Callable:
        def pre(module: Any, args: Sequence[Any]) -> None:
            x = args[0]
            mask = self.mask
            if mask is not None and x.numel() // acc.cols != mask.numel():
                mask = None
            if x.device != acc.h.device:
                x = x.to(acc.h.device)
            if mask is not None and mask.device != x.device:
                mask = mask.to(x.device)
            acc.add(x.detach(), mask)
        return pre

    def statistics(self) -> Dict[str, np.ndarray]:
        return statistics_tensors(self.layers)

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []


def token_sequences(ids: Sequence[int], samples: int, seq: int, pad_id: int) -> List[Any]:
    """Up to `samples` consecutive sequences of `seq` tokens from `ids`, as (ids, mask) NumPy int64/bool [seq]
    pairs; the last one padded with pad_id (mask False) when the text ends inside it."""
    out = []
    for s in range(samples):
        chunk = list(ids[s * seq:(s + 1) * seq])
        if not chunk:
            break
        mask = np.zeros(seq, dtype=bool)
        mask[:len(chunk)] = True
        chunk += [pad_id] * (seq - len(chunk))
        out.append((np.array(chunk, dtype=np.int64), mask))
    return out


def checkpoint_bytes(model_dir: str) -> int:
    """The bytes of the checkpoint's safetensors files: what loading its weights takes."""
    return sum(os.path.getsize(p) for p in checkpoint_files(model_dir))


def free_memory(device: str) -> int:
    """What `device` has free now: the GPU's free memory, or the host's MemAvailable."""
    if device == "cuda":
        torch = _need("torch")
        return int(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def _load(model_dir: str, device: str, log: Callable[[str], None], offload: Optional[Dict[str, Any]] = None) -> Any:
    """The class the checkpoint was saved from (config.json's architectures), so that every linear it has is the
    checkpoint's: an Auto class could add a head the checkpoint lacks (AutoModelForCausalLM makes a BERT encoder a
    BertLMHeadModel with a new, unsaved transform layer). Without that entry: AutoModelForCausalLM, else AutoModel.
    `offload`: accelerate's max_memory and offload_folder, for a model loaded block by block (none: whole, on
    `device`)."""
    transformers = _need("transformers")
    kw: Dict[str, Any] = {"torch_dtype": "auto", "local_files_only": True}
    if offload is not None:
        _need("accelerate")
        kw.update(device_map="auto", **offload)
    config = transformers.AutoConfig.from_pretrained(model_dir, local_files_only=True)
    names = [a for a in (getattr(config, "architectures", None) or []) if hasattr(transformers, a)]
    if names:
        log(f"loading {names[0]} (config.json's architectures)")
        model = getattr(transformers, names[0]).from_pretrained(model_dir, **kw)
    else:
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, **kw)
        except ValueError as e:  # not a causal LM: the base model (its linears are the checkpoint's all the same)
            log(f"not a causal LM ({str(e).splitlines()[0]}): loading AutoModel")
            model = transformers.AutoModel.from_pretrained(model_dir, **kw)
    return (model if offload is not None else model.to(device)).eval()


def calibrate(model_dir: str, output: str, text: str, samples: int, seq: int, batch: int, device: Optional[str],
              include_embeddings: bool = False, err: TextIO = sys.stderr,
              max_memory: Optional[int] = None) -> Dict[str, np.ndarray]:
    """Runs the calibration and writes `output`; returns the statistics written. `max_memory`: the bytes the model's
    weights may take on `device` (default: what it has free, less a tenth for the activations and H); a model whose
    weights exceed it is loaded block by block."""
    torch = _need("torch")
    transformers = _need("transformers")

    def log(s: str) -> None:
        print(f"epk-calibrate: {s}", file=err, flush=True)

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("epk-calibrate: --device cuda: torch sees no CUDA device")
    tensors = checkpoint_tensors(model_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    seqs = token_sequences(ids, samples, seq, pad_id)
    if not seqs:
        raise SystemExit("epk-calibrate: --text: the text has no tokens")
    if len(seqs) < samples:
        log(f"the text has {len(ids)} tokens: {len(seqs)} sequences of {seq}, not {samples}")
    weights = checkpoint_bytes(model_dir)
    budget = max_memory if max_memory is not None else int(free_memory(device) * 0.9)
    offload_dir = None
    offload = None
    if weights > budget:
        offload_dir = tempfile.TemporaryDirectory(prefix="epk-calibrate-offload-")
        limits: Dict[Any, Any] = {0 if device == "cuda" else "cpu": budget}
        if device == "cuda":
            limits["cpu"] = int(free_memory("cpu") * 0.9)
        offload = {"max_memory": limits, "offload_folder": offload_dir.name}
        log(f"the weights ({weights / 2**30:.2f} GiB) exceed {budget / 2**30:.2f} GiB on {device}: calibrating block "
            f"by block (accelerate keeps the rest in host memory or in {offload_dir.name})")
    log(f"loading {model_dir} on {device}")
    try:
        return _calibrate_loaded(model_dir, output, seqs, seq, batch, device, include_embeddings, tensors,
                                 _load(model_dir, device, log, offload), log)
    finally:
        if offload_dir is not None:
            offload_dir.cleanup()


def _calibrate_loaded(model_dir: str, output: str, seqs: List[Any], seq: int, batch: int, device: str,
                      include_embeddings: bool, tensors: Dict[str, TensorInfo], model: Any,
                      log: Callable[[str], None]) -> Dict[str, np.ndarray]:
    torch = _need("torch")
    hooks = LinearHooks(model, tensors, include_embeddings, log, device=torch.device(device))
    if not hooks.layers:
        hooks.close()
        raise SystemExit(f"epk-calibrate: {model_dir}: no nn.Linear whose weight epk compress encodes")
    log(f"{len(hooks.layers)} weights, {len(seqs)} sequences of {seq} tokens, batch {batch}")
    start = time.monotonic()
    try:
        with torch.no_grad():
            for b in range(0, len(seqs), batch):
                part = seqs[b:b + batch]
                input_ids = torch.from_numpy(np.stack([i for i, _ in part])).to(device)
                mask = torch.from_numpy(np.stack([m for _, m in part])).to(device)
                hooks.mask = mask
                model(input_ids=input_ids, attention_mask=mask.to(torch.int64), use_cache=False)
                done = b + len(part)
                log(f"{done}/{len(seqs)} sequences, {time.monotonic() - start:.1f} s")
        stats = hooks.statistics()
    finally:
        hooks.close()
    write_safetensors(output, stats, {"tool": "epk-calibrate", "model": str(model_dir), "samples": str(len(seqs)),
                                      "seq": str(seq)})
    log(f"wrote {output}: {len(stats) // 2} weights")
    return stats


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="epk-calibrate",
                                description="Measure the calibration statistics of `epk compress --calibration` "
                                            "(docs/FORMAT.md 12) by running a transformers model on text.")
    p.add_argument("model_dir", help="a transformers model folder with safetensors weights and a tokenizer")
    p.add_argument("-o", "--output", required=True, help="the statistics file to write (.safetensors)")
    p.add_argument("--text", required=True, help="a UTF-8 text file: the calibration tokens")
    p.add_argument("--samples", type=int, default=128, help="number of sequences (default 128)")
    p.add_argument("--seq", type=int, default=2048, help="tokens per sequence (default 2048)")
    p.add_argument("--batch", type=int, default=1, help="sequences per forward (default 1)")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="where the model runs (default: cuda when torch sees a GPU, else cpu)")
    p.add_argument("--include-embeddings", action="store_true",
                   help="statistics for embedding tables used as linears (a tied LM head), as epk compress "
                        "--include-embeddings encodes them")
    p.add_argument("--max-memory-gb", type=float, default=None,
                   help="the memory the model's weights may take on the device (default: what it has free, less a "
                        "tenth); a larger model is calibrated block by block (needs accelerate)")
    a = p.parse_args(argv)
    for flag, v in (("--samples", a.samples), ("--seq", a.seq), ("--batch", a.batch)):
        if v < 1:
            p.error(f"{flag} {v}: must be at least 1")
    if a.max_memory_gb is not None and a.max_memory_gb <= 0:
        p.error(f"--max-memory-gb {a.max_memory_gb}: must be above 0")
    if not Path(a.model_dir).is_dir():
        p.error(f"{a.model_dir}: not a folder")
    try:
        text = Path(a.text).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        p.error(f"--text {a.text}: {e}")
    try:
        calibrate(a.model_dir, a.output, text, a.samples, a.seq, a.batch, a.device, a.include_embeddings,
                  max_memory=None if a.max_memory_gb is None else int(a.max_memory_gb * 2**30))
    except ValueError as e:
        print(f"epk-calibrate: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
