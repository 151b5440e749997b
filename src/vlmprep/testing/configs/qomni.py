"""Tiny config of the Qwen3-Omni thinker: Qwen3-VL's images and videos (deepstack), audio clips, a MoE decoder.

Its audio tower cuts a clip's log-mel frames into windows of `2 * n_window` frames, each subsampled 8x by three strided
convolutions; the processor's count of audio placeholders hard-codes the 13 tokens of a full 100-frame window, so
`n_window` keeps upstream's 50 (the tiny clips fit one window: 40 frames give 5 tokens).
"""

from __future__ import annotations

import transformers

from .omni import QWEN_OMNI_AUDIO_END, QWEN_OMNI_AUDIO_START, qwen_omni_audio
from .parts import TINY_AUDIO_TOKEN_ID, TINY_IMAGE_TOKEN_ID, TINY_VIDEO_TOKEN_ID
from .patch_grid import QWEN_SPECIAL_TOKENS, mrope_text, two_layer_tower

QWEN3_OMNI_N_WINDOW = 50
# Position ids per second of a video (upstream's default is 25): small, so a tiny video's frames and its audio track
# interleave under `use_audio_in_video` (frames 2 seconds apart are 4 positions apart, audio tokens 1 apart)
QWEN3_OMNI_POSITIONS_PER_SECOND = 2


def tiny_qwen3_omni_moe_config() -> transformers.Qwen3OmniMoeThinkerConfig:
    """A tiny Qwen3-Omni thinker config: Qwen3-VL's two-layer tower (deepstack from vision layer 0), a two-layer audio
    tower over 16 mel bins, a decoder whose layers route to 2 of 4 experts, with interleaved multimodal rope.

    Returns:
        `transformers.Qwen3OmniMoeThinkerConfig`
    """
    audio = qwen_omni_audio(
        max_source_positions=32,
        n_window=QWEN3_OMNI_N_WINDOW,
        n_window_infer=2 * QWEN3_OMNI_N_WINDOW,
        downsample_hidden_size=8,
        # At upstream's 0.02 (and at 0.1) two clips move the last logits by under 1e-3: too little to tell them apart
        initializer_range=0.2,
    )
    vision = two_layer_tower(num_position_embeddings=16, deepstack_visual_indexes=[0])
    text = {key: value for key, value in mrope_text().items() if key != "intermediate_size"}
    text["rope_parameters"] = {**text["rope_parameters"], "mrope_interleaved": True}
    text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, model_type="qwen3_omni_moe_text")
    config = transformers.Qwen3OmniMoeThinkerConfig(
        text_config=text,
        vision_config=vision,
        audio_config=audio,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        video_token_id=TINY_VIDEO_TOKEN_ID,
        audio_token_id=TINY_AUDIO_TOKEN_ID,
        audio_start_token_id=QWEN_OMNI_AUDIO_START,
        position_id_per_seconds=QWEN3_OMNI_POSITIONS_PER_SECOND,
    )
    # Not arguments of the config's constructor: `get_rope_index` finds images and videos after the vision start
    config.vision_start_token_id = QWEN_SPECIAL_TOKENS["vision_start_token_id"]
    config.audio_end_token_id = QWEN_OMNI_AUDIO_END
    return config
