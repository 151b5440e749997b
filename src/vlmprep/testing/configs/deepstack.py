"""Tiny configs of the Granite families whose vision features are also summed in at several decoder layers
(deepstack): Granite 4 Vision (any-res crops, `(decoder layer, features)` pairs, placeholders zeroed) and Granite
Docling (masked tiles, one entry per layer as Qwen3-VL's)."""

from __future__ import annotations

import transformers

from .parts import TINY_IMAGE_TOKEN_ID, TINY_TEXT_SPECIAL_IDS, tiny_text_config, tiny_vision_config

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


def tiny_granite_docling_config() -> transformers.GraniteDoclingConfig:
    """A tiny Granite Docling config: 16 px tiles of 4 px patches, pixel-shuffled by 2 into 4 tokens each (16 on the
    fine path), two deepstack taps (added after each of the 2 decoder layers: the second moves only the placeholders'
    own logits), Granite decoder.

    Returns:
        `transformers.GraniteDoclingConfig`
    """
    vision = tiny_vision_config(num_hidden_layers=2)
    # Weights drawn 10x wider than upstream's 0.02 in the tower and connector: at 0.02 the deepstack mergers' rows are
    # ~1% of the hidden states and move the logits by 6e-5 only
    vision.update(out_hidden_size=32, scale_factor=2, deepstack_visual_indexes=[0, 1], use_fine_route=True)
    vision["initializer_range"] = 0.2
    return transformers.GraniteDoclingConfig(
        # Its text config's special ids default to a 100k vocabulary's, and its multipliers to the checkpoint's: with
        # them (attention 1/64 for 64-wide heads, embeddings x12, residuals x0.263) two images move a tiny model's
        # logits by 2e-4 only; the logits stay divided by `logits_scaling` (4)
        text_config=tiny_text_config(
            "granite_docling_text",
            **TINY_TEXT_SPECIAL_IDS,
            attention_multiplier=0.25,
            embedding_multiplier=1.0,
            residual_multiplier=1.0,
        ),
        vision_config=vision,
        image_token_id=TINY_IMAGE_TOKEN_ID,
        pad_token_id=0,
    )
