"""The parts every tiny config is made of: the shared special token ids, a tiny decoder and tiny vision towers.

Each part is a plain dict (what a composite config takes as `text_config` or `vision_config`), so a family's builder
states only what makes it special: `tiny_text_config("gemma3_text", head_dim=16, sliding_window=6, ...)`.
"""

from __future__ import annotations

from typing import Any

# Special token ids shared by every tiny config: ids above 100 are special, so that random text ids (3..99) never
# collide with them.
TINY_VOCAB_SIZE = 128
TINY_IMAGE_TOKEN_ID = 122
TINY_VIDEO_TOKEN_ID = 123
TINY_BOI_TOKEN_ID = 120
TINY_EOI_TOKEN_ID = 121
TINY_AUDIO_TOKEN_ID = 124
TINY_BOA_TOKEN_ID = 116
TINY_EOA_TOKEN_ID = 117
TINY_IMAGE_SIZE = 16
# A tiny decoder's padding, BOS and EOS ids (the ids a random answer is kept from: they end or pad a turn)
TINY_TEXT_SPECIAL_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


def tiny_text_config(model_type: str | None = "llama", **overrides: Any) -> dict[str, Any]:
    """A tiny decoder: vocabulary 128, 2 layers, hidden size 32, 2 attention heads sharing 1 key-value head.

    Args:
        model_type (`str`, *optional*, defaults to `"llama"`):
            The decoder's model type; `None` leaves it out (a composite config whose text config has one class).
        overrides (`Any`): further entries, or replacements of the tiny ones (`head_dim=16`, `layer_types=[...]`).

    Returns:
        `dict[str, Any]`: a `text_config`.

    Example:

    ```python
    >>> tiny_text_config("qwen2", head_dim=16)["num_hidden_layers"]
    2

    ```
    """
    config: dict[str, Any] = {} if model_type is None else {"model_type": model_type}
    config.update(
        vocab_size=TINY_VOCAB_SIZE,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    return {**config, **overrides}


def tiny_vision_config(
    model_type: str | None = None,
    num_hidden_layers: int = 1,
    image_size: int | None = TINY_IMAGE_SIZE,
    patch_size: int = 4,
    **overrides: Any,
) -> dict[str, Any]:
    """A tiny ViT-like vision tower (CLIP, SigLIP, Pixtral, InternViT, ...): hidden size 32, 2 heads, 4 px patches.

    Args:
        model_type (`str`, *optional*): the tower's model type; `None` leaves it out (the family's own tower).
        num_hidden_layers (`int`, *optional*, defaults to 1): encoder layers.
        image_size (`int`, *optional*, defaults to 16):
            Image side in pixels; `None` leaves it out (towers of any size).
        patch_size (`int`, *optional*, defaults to 4): patch side in pixels.
        overrides (`Any`): further entries (`projection_dim=32`, `num_patches=16`, ...).

    Returns:
        `dict[str, Any]`: a `vision_config`.
    """
    config: dict[str, Any] = {} if model_type is None else {"model_type": model_type}
    config.update(hidden_size=32, intermediate_size=64, num_hidden_layers=num_hidden_layers, num_attention_heads=2)
    if image_size is not None:
        config["image_size"] = image_size
    return {**config, "patch_size": patch_size, **overrides}


def tiny_sam_vision_config(
    model_type: str | None = None, output_channels: int = 16, image_size: int = TINY_IMAGE_SIZE, patch_size: int = 2
) -> dict[str, Any]:
    """A tiny SAM-like vision tower (GOT-OCR2's, DeepSeek-VL-Hybrid's high-resolution one): a windowed layer, then a
    global one, and a neck of `output_channels`.

    Args:
        model_type (`str`, *optional*): the tower's model type; `None` leaves it out (the family's own tower).
        output_channels (`int`, *optional*, defaults to 16): channels of the neck.
        image_size (`int`, *optional*, defaults to 16): image side in pixels.
        patch_size (`int`, *optional*, defaults to 2): patch side in pixels.

    Returns:
        `dict[str, Any]`: a `vision_config`.
    """
    config: dict[str, Any] = {} if model_type is None else {"model_type": model_type}
    config.update(hidden_size=32, output_channels=output_channels, num_hidden_layers=2, num_attention_heads=2)
    config.update(image_size=image_size, patch_size=patch_size, window_size=4, global_attn_indexes=[1], mlp_dim=64)
    return config
