"""Tiny configs of the families whose vision features are summed in at several decoder layers as `(decoder layer,
features)` pairs, placeholders zeroed: Granite 4 Vision (any-res crops) and Granite Docling (sub-images)."""

from __future__ import annotations

import transformers

from .parts import TINY_IMAGE_TOKEN_ID, tiny_text_config, tiny_vision_config

# The any-res grids (height, width in px) the image processor picks from; an 8 px crop per tower call.
GRANITE4_VISION_PINPOINTS = [[8, 8], [8, 16], [16, 8]]


def _tiny_qformer() -> dict:
    # One layer with cross-attention, as upstream's default Q-Former (a config given as a dict replaces those defaults
    # with Blip-2's 12 layers), and no dropout (its default is 0.1), so the vision part in train mode stays comparable
    # with transformers.
    return {
        "model_type": "blip_2_qformer",
        "num_hidden_layers": 1,
        "intermediate_size": 64,
        "cross_attention_frequency": 1,
        "max_position_embeddings": 64,
        "vocab_size": 8,
        "use_qformer_text_input": False,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    }


def tiny_granite4_vision_config() -> transformers.Granite4VisionConfig:
    """A tiny Granite 4 Vision config: any-res grids of 8 px CLIP crops (2 px patches, a 4x4 grid), window Q-Former
    projectors halving each side, Granite decoder.

    The vision tower is 64 wide (the Q-Former's heads are `hidden_size // 64`). Upstream's default spatial targets
    (layers 12-21) would inject nothing into a 2-layer decoder: the layerwise projector targets layer 0 and the spatial
    ones layer 1, where upstream keeps the last pair of a layer, so one projector of each kind reaches the logits.

    Returns:
        `transformers.Granite4VisionConfig`
    """
    vision = tiny_vision_config("clip_vision_model", image_size=8, patch_size=2, hidden_size=64, projection_dim=32)
    return transformers.Granite4VisionConfig(
        text_config=tiny_text_config("granite4_vision_text"),
        vision_config=vision,
        qformer_config=_tiny_qformer(),
        image_grid_pinpoints=GRANITE4_VISION_PINPOINTS,
        image_token_index=TINY_IMAGE_TOKEN_ID,
        vision_feature_layer=-1,
        downsample_rate="1/2",
        deepstack_layer_map=[[1, 0]],
        spatial_vision_layer=-1,
        spatial_target_layers=[1, 1, 1, 1],
        projector_dropout=0.0,
    )
