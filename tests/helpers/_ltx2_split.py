"""One LTX-2 transformer forward and backward in float64, whole and split over the 2 processes of a torchrun
launch (gloo), for both rotary layouts, with a padded prompt mask and per-row timesteps, and with STG's perturbed
rows (LTX-2.3's blocks: gated attention, prompt modulation, perturbed self-attention) and with the modalities
isolated: prints, on the first process, ``<rope_type>-<case> <forward difference>
<gradient difference>``, each relative to the largest whole value
(the split gradients summed over the group)."""

import torch
import torch.distributed as dist

from flowrl.mesh import Mesh, enable_sequence_parallel
from flowrl.pipelines.ltx2.parallel import av_plan, gather_cross_attention_keys


def build(rope_type: str, case: str = "plain"):
    from diffusers import LTX2VideoTransformer3DModel

    torch.manual_seed(0)
    model = LTX2VideoTransformer3DModel(
        in_channels=128,
        out_channels=128,
        patch_size=1,
        patch_size_t=1,
        num_attention_heads=2,
        attention_head_dim=8,
        cross_attention_dim=16,
        audio_in_channels=32,
        audio_out_channels=32,
        audio_num_attention_heads=2,
        audio_attention_head_dim=4,
        audio_cross_attention_dim=8,
        num_layers=2,
        qk_norm="rms_norm_across_heads",
        caption_channels=24,
        rope_type=rope_type,
        # LTX-2.3's blocks: gated attention (per-head gates), prompt modulation, STG's perturbed processors
        **(
            {
                "gated_attn": True,
                "audio_gated_attn": True,
                "cross_attn_mod": True,
                "audio_cross_attn_mod": True,
                "perturbed_attn": True,
            }
            if case == "stg"
            else {}
        ),
    ).double()
    with torch.no_grad():  # zero-initialised gates and tables: every path carries signal
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def inputs(case: str = "plain") -> dict:
    g = torch.Generator().manual_seed(1)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0  # the second prompt padded
    t = torch.tensor([300.0, 700.0], dtype=torch.float64)
    return {
        "hidden_states": torch.randn(2, 8, 128, generator=g).double(),  # 2 x 2 x 2 video tokens
        "audio_hidden_states": torch.randn(2, 6, 32, generator=g).double(),
        "encoder_hidden_states": torch.randn(2, 8, 24, generator=g).double(),
        "audio_encoder_hidden_states": torch.randn(2, 8, 24, generator=g).double(),
        "timestep": t,
        "audio_timestep": 0.9 * t,
        "sigma": t,
        "audio_sigma": 0.9 * t,
        "encoder_attention_mask": mask,
        "audio_encoder_attention_mask": mask,
        "num_frames": 2,
        "height": 2,
        "width": 2,
        "fps": 24.0,
        "audio_num_frames": 6,
        "use_cross_timestep": True,
        "return_dict": False,
        # STG: the second row's self-attention perturbed in block 1; isolated: no cross-modal attention
        **(
            {"spatio_temporal_guidance_blocks": [1], "perturbation_mask": torch.tensor([1.0, 0.0]).double()}
            if case == "stg"
            else {}
        ),
        **({"isolate_modalities": True} if case == "isolated" else {}),
    }


def loss(out) -> torch.Tensor:
    video, audio = out[0], out[1]
    return (video * torch.arange(video.numel()).reshape(video.shape).sin()).sum() + (
        audio * torch.arange(audio.numel()).reshape(audio.shape).cos()
    ).sum()


def main() -> None:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    for rope_type, case in (("split", "plain"), ("interleaved", "plain"), ("split", "stg"), ("split", "isolated")):
        whole = build(rope_type, case)
        reference = whole(**inputs(case))
        loss(reference).backward()
        model = build(rope_type, case)
        enable_sequence_parallel(model, Mesh(2, rank, 2), torch.device("cpu"), av_plan(rope_type))
        gather_cross_attention_keys(model)
        out = model(**inputs(case))
        loss(out).backward()
        forward = max(((o - r).abs().max() / r.abs().max()).item() for o, r in zip(out, reference))
        gradient = 0.0
        for p, q in zip(model.parameters(), whole.parameters()):
            if q.grad is None:  # the cross-modal attentions of isolated modalities
                assert p.grad is None
                continue
            g = p.grad.clone()
            dist.all_reduce(g)
            gradient = max(gradient, ((g - q.grad).abs().max() / q.grad.abs().max().clamp_min(1e-30)).item())
        if rank == 0:
            print(f"{rope_type}-{case}", forward, gradient, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
