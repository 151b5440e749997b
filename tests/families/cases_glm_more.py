"""GLM-4.5V (`glm4v_moe`) and GLM-4.6V (`glm46v`): GLM-4V's prompts and tiny vision tower on their own decoders.

Prompts are built exactly as GLM-4V's by the builder of `cases_qwen.py` (frames of image placeholders inside video
start and end, `mm_token_type_ids` 1 for images and 2 for video frames). That module registers later than this one
(modules load in name order), so its case is looked up when a prompt or config is built, not at import.
"""

from __future__ import annotations

import transformers

from family_registry import FAMILY_CASES, FamilyCase, register


class GlmPromptLayout:
    """A config read as GLM-4V's by the shared builder, which picks the prompt layout by `model_type`."""

    model_type = "glm4v"

    def __init__(self, config):
        self._config = config

    def __getattr__(self, name: str):
        return getattr(self._config, name)


def build_glm_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    return FAMILY_CASES["glm4v"].build_inputs(GlmPromptLayout(config), segments, image_seeds)


def glm4v_parts() -> tuple[dict, dict, dict]:
    """Text config, vision config and special token ids of the tiny GLM-4V config."""
    glm4v = FAMILY_CASES["glm4v"].make_config()
    tokens = ("image_token_id", "video_token_id", "image_start_token_id", "image_end_token_id")
    tokens += ("video_start_token_id", "video_end_token_id")
    text = glm4v.text_config.to_dict()
    text = {key: text[key] for key in (*TEXT_KEYS, "rope_parameters")}
    return text, glm4v.vision_config.to_dict(), {key: getattr(glm4v, key) for key in tokens}


TEXT_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
)


def tiny_glm4v_moe_config() -> transformers.Glm4vMoeConfig:
    # Layer 0 dense, layer 1 routes to 2 of 4 experts plus a shared one. Half the head dim is rotary (the default
    # `partial_rotary_factor` 0.5): 4 frequencies, split over the (t, h, w) position rows.
    text, vision, tokens = glm4v_parts()
    text["rope_parameters"] = {**text["rope_parameters"], "mrope_section": [1, 1, 2], "partial_rotary_factor": 0.5}
    text.update(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, first_k_dense_replace=1)
    return transformers.Glm4vMoeConfig(text_config=text, vision_config=vision, **tokens)


def tiny_glm46v_config() -> transformers.Glm46VConfig:
    text, vision, tokens = glm4v_parts()
    return transformers.Glm46VConfig(
        text_config={**text, "model_type": "glm4v_text"},
        vision_config={**vision, "model_type": "glm4v_vision"},
        **tokens,
    )


PIXEL_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw")


def upstream_beam_skips(upstream_class) -> dict[str, str]:
    """GLM-4V's upstream beam bug, which both classes copy (checked against uncached forwards in test_generate.py)."""
    return {
        "generate_matches_transformers": (
            f"transformers 5.24's `{upstream_class.__name__}._expand_multimodal_outputs` (copied from GLM-4V) repeats "
            "features image by image ([A, A, A, B, B, B]) instead of copy by copy, so upstream's beams and "
            "num_return_sequences with two images in a prompt are wrong; greedy and sampling parity and exact beams "
            "are checked in tests/scenarios/test_generate.py"
        ),
    }


for name, upstream_class, make_config in (
    ("glm4v_moe", transformers.Glm4vMoeForConditionalGeneration, tiny_glm4v_moe_config),
    ("glm46v", transformers.Glm46VForConditionalGeneration, tiny_glm46v_config),
):
    register(
        FamilyCase(
            name,
            upstream_class,
            make_config,
            build_glm_inputs,
            per_token_keys=("mm_token_type_ids",),
            pixel_keys=PIXEL_KEYS,
            skip=upstream_beam_skips(upstream_class),
        )
    )
