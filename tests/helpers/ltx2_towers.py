"""The module-name groups of ``build_tiny_ltx2``'s transformer by tower ("*" = block index): what AV-GRPO's per-phase
trainable split and the adapter's ``tower_of`` sort the parameters into.

The a2v / v2a *scale-shift* parameters are not separable by module: each block's
video_a2v_cross_attn_scale_shift_table (5, D) holds [a2v scale, a2v shift, v2a scale, v2a shift, a2v gate] for the
video side and audio_a2v_cross_attn_scale_shift_table (5, D_audio) the same rows for the audio side (its last row is
the v2a gate); av_cross_attn_{video,audio}_scale_shift emit both directions' parameters."""

VIDEO_TOWER = [
    "caption_projection",
    "proj_in",
    "proj_out",
    "scale_shift_table",
    "time_embed",
    "transformer_blocks.*.attn1",
    "transformer_blocks.*.attn2",
    "transformer_blocks.*.ff",
    "transformer_blocks.*.scale_shift_table",
]
AUDIO_TOWER = [
    "audio_caption_projection",
    "audio_proj_in",
    "audio_proj_out",
    "audio_scale_shift_table",
    "audio_time_embed",
    "transformer_blocks.*.audio_attn1",
    "transformer_blocks.*.audio_attn2",
    "transformer_blocks.*.audio_ff",
    "transformer_blocks.*.audio_scale_shift_table",
]
AUDIO_TO_VIDEO_ATTN = ["av_cross_attn_video_a2v_gate", "transformer_blocks.*.audio_to_video_attn"]
VIDEO_TO_AUDIO_ATTN = ["av_cross_attn_audio_v2a_gate", "transformer_blocks.*.video_to_audio_attn"]
AV_CROSS_MODULATION = [  # shared by both directions
    "av_cross_attn_audio_scale_shift",
    "av_cross_attn_video_scale_shift",
    "transformer_blocks.*.audio_a2v_cross_attn_scale_shift_table",
    "transformer_blocks.*.video_a2v_cross_attn_scale_shift_table",
]
