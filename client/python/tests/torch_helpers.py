"""What the torch tests share: the test model's references as torch tensors, the Llama that carries its
weights, and the skips for CUDA and for a package built without client-side decode. Importing it skips the
importing module without torch."""

import pytest

import epk
import epk_testdata

torch = pytest.importorskip("torch")

CUDA = torch.cuda.is_available() and epk.HAS_CUDA
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU and the package built with cuda.h")
MODEL = "test"
UP = "model.layers.0.mlp.up_proj.weight"
_TORCH_DT = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}


def ref_tensor(entry):
    """A safetensors entry as a CPU torch tensor of its dtype."""
    dtype, shape, raw = entry
    return torch.frombuffer(bytearray(raw), dtype=_TORCH_DT[dtype]).reshape(shape)


def as_bits(t):
    """Any tensor's bytes as a NumPy uint8 array (on the CPU)."""
    return t.detach().contiguous().cpu().view(torch.uint8).numpy()


def llama_config(layers=epk_testdata.LAYERS):
    transformers = pytest.importorskip("transformers")
    return transformers.LlamaConfig(
        hidden_size=epk_testdata.HIDDEN, intermediate_size=epk_testdata.INTERMEDIATE, num_hidden_layers=layers,
        num_attention_heads=epk_testdata.HEADS, num_key_value_heads=epk_testdata.KV_HEADS,
        head_dim=epk_testdata.HEAD_DIM, vocab_size=epk_testdata.VOCAB, max_position_embeddings=64,
        tie_word_embeddings=False, architectures=["LlamaForCausalLM"])


def build_llama(config):
    """As epk.torch.load builds it: parameters in bf16 (the default dtype while it runs), buffers as the model
    makes them."""
    transformers = pytest.importorskip("transformers")
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        return transformers.LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(previous)


def decompressed_llama(config, model, dev):
    """The Llama of `config` with the decompressed test model's weights, on dev: the reference of attached models."""
    reference = build_llama(config)
    reference.load_state_dict({n: ref_tensor(e) for n, e in model["ref"]["dense:bf16"].items()}, strict=True)
    return reference.to(dev)


def needs_client_decode():
    import epk.stored
    if not epk.stored.available():
        pytest.skip(f"the package was built without client-side decode: {epk.stored.missing()}")
