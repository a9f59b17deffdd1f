"""What a GPU family stage builds, built on the meta device: the published architecture's parameter counts, and the
estimate read from the configs the stage saves (the tests of ``flowrl.benchmarks.perf.gpu``'s families)."""

from __future__ import annotations

import torch


def published_build(name: str, folder, counts: tuple[int, int]):
    """Build family ``name``'s stage at full size on meta in bf16 and check its transformer and text-encoder
    parameter ``counts``, the dtypes (bf16, the VAE fp32), and that the saved configs give the estimate the same
    counts; returns (pipe, the stage's config, the estimate's ``ModelSize``)."""
    from flowrl.benchmarks.perf import gpu
    from flowrl.estimate import model_size

    pipe = gpu.build_family(name, gpu.FULL, torch.device("meta"), torch.bfloat16)
    built = (
        sum(p.numel() for p in pipe.transformer.parameters()),
        sum(p.numel() for p in pipe.text_encoder.parameters()),
    )
    assert built == counts
    assert pipe.transformer.dtype == torch.bfloat16 and pipe.vae.dtype == torch.float32
    gpu.save_family_configs(pipe, folder)
    cfg = gpu.family_config(name, gpu.FULL, folder, 2, "bf16")
    m = model_size(cfg)
    assert m.source == f"configs of {folder}" and (m.transformer_params, m.text_encoder_params) == counts
    return pipe, cfg, m
