"""A diffusers transformer (Flux, its two block lists) run on weights that epkd serves, against the same model
loaded from `epk decompress`'s output, on host pools and on a GPU. Skipped without torch or diffusers."""

import shutil

import pytest

import epk
from conftest import Daemon, run

torch = pytest.importorskip("torch")
import epk.torch as epk_torch  # noqa: E402  (needs torch)
from torch_helpers import MODEL, needs_cuda  # noqa: E402


# ---- diffusers


FLUX = dict(patch_size=1, in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=64,
            num_attention_heads=4, joint_attention_dim=96, pooled_projection_dim=48, axes_dims_rope=(16, 24, 24))


def flux_inputs(dev):
    g = torch.Generator().manual_seed(7)
    image, text = 24, 10  # image and text tokens
    return dict(
        hidden_states=torch.randn(1, image, FLUX["in_channels"], generator=g).to(dev, torch.bfloat16),
        encoder_hidden_states=torch.randn(1, text, FLUX["joint_attention_dim"], generator=g).to(dev, torch.bfloat16),
        pooled_projections=torch.randn(1, FLUX["pooled_projection_dim"], generator=g).to(dev, torch.bfloat16),
        timestep=torch.tensor([0.5], device=dev, dtype=torch.bfloat16),
        img_ids=torch.stack([torch.zeros(image), torch.arange(image) // 6, torch.arange(image) % 6], 1).to(dev),
        txt_ids=torch.zeros(text, 3, device=dev))


@pytest.mark.parametrize("where", ["cpu", pytest.param("cuda", marks=needs_cuda)])
def test_diffusers_transformer_attach_gives_the_decompressed_models_output(bins, tmp_path, where):
    diffusers = pytest.importorskip("diffusers")
    dev = torch.device("cuda", 0) if where == "cuda" else torch.device("cpu")
    torch.manual_seed(0)
    src = tmp_path / "flux"
    diffusers.FluxTransformer2DModel(**FLUX).to(torch.bfloat16).save_pretrained(src)
    weights = "diffusion_pytorch_model.safetensors"
    packed = tmp_path / "flux.epk"
    run([bins["epk"], "compress", src / weights, "-o", packed, "--bpp", "4"])
    ref_dir = tmp_path / "decompressed"
    shutil.copytree(src, ref_dir)
    run([bins["epk"], "decompress", packed, "-o", ref_dir / weights])
    reference = diffusers.FluxTransformer2DModel.from_pretrained(ref_dir, torch_dtype=torch.bfloat16).to(dev).eval()
    with torch.no_grad():
        want = reference(**flux_inputs(dev)).sample
    d = Daemon(bins, packed, budget_mb=64, cpu=(where == "cpu"))
    try:
        with epk.Client(d.socket) as c:
            assert any(t["encoding"] == "lattice-rans" for t in c.tensors(MODEL))
            m = diffusers.FluxTransformer2DModel(**FLUX).to(dev, torch.bfloat16).eval()  # other random weights
            with torch.no_grad():
                assert not torch.equal(m(**flux_inputs(dev)).sample, want)
            att = epk_torch.attach(m, c, MODEL, layout="dense:bf16", prefetch=1)
            assert att.block_names == [f"transformer_blocks.{i}" for i in range(FLUX["num_layers"])] + \
                [f"single_transformer_blocks.{i}" for i in range(FLUX["num_single_layers"])]
            with torch.no_grad():
                first = m(**flux_inputs(dev)).sample
                second = m(**flux_inputs(dev)).sample
            assert torch.equal(first, want) and torch.equal(second, want)
            att.close()
            assert c.stats()["pins"] == 0
    finally:
        d.close()
