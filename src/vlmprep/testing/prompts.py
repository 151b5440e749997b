"""Prompts and pixels for the tiny configs of `vlmprep.testing.configs`: token ids with image runs, random images."""

from __future__ import annotations

import torch
from transformers import PreTrainedConfig

from .configs.parts import TINY_BOI_TOKEN_ID, TINY_EOI_TOKEN_ID, TINY_IMAGE_SIZE

IMAGE = "<image>"  # marks where an image goes in a prompt built by `build_prompt`
VIDEO = "<video>"  # marks where a video goes in a prompt, for the test cases of families that take videos
AUDIO = "<audio>"  # marks where an audio clip goes in a prompt, for the test cases of families that take audio


def tokens_per_image(config: PreTrainedConfig) -> int:
    """Placeholder tokens of one image for a tiny config of a fixed-resolution family.

    Args:
        config (`PreTrainedConfig`): a config from this module.

    Returns:
        `int`
    """
    if config.model_type == "gemma3":
        return config.mm_tokens_per_image
    vision = config.vision_config
    patches = (vision.image_size // vision.patch_size) ** 2
    if config.model_type == "llava" and config.vision_feature_select_strategy == "full":
        patches += 1
    return patches


def build_prompt(config: PreTrainedConfig, segments: list) -> tuple[list[int], list[int] | None]:
    """Token ids (and the token types the family's processor would return) for text pieces and images.

    Args:
        config (`PreTrainedConfig`): a config from this module.
        segments (`list`): items are lists of text token ids, or `IMAGE`.

    Returns:
        `tuple[list[int], list[int] | None]`: the ids, and token types for Gemma3/PaliGemma (`None` otherwise).

    Example:

    ```python
    >>> from vlmprep.testing import tiny_gemma3_config
    >>> ids, types = build_prompt(tiny_gemma3_config(mm_tokens_per_image=4), [[5, 6], IMAGE, [7]])
    >>> ids
    [5, 6, 120, 122, 122, 122, 122, 121, 7]
    >>> types
    [0, 0, 0, 1, 1, 1, 1, 0, 0]

    ```
    """
    ids: list[int] = []
    image_run = [config.image_token_id] * tokens_per_image(config)
    for segment in segments:
        if segment is IMAGE:
            if config.model_type == "gemma3":
                ids += [TINY_BOI_TOKEN_ID, *image_run, TINY_EOI_TOKEN_ID]
            else:
                ids += image_run
        else:
            ids += list(segment)
    if config.model_type == "gemma3":
        return ids, [int(token == config.image_token_id) for token in ids]
    if config.model_type == "paligemma":
        return ids, [0] * len(ids)
    return ids, None


def random_pixels(num_images: int, seed: int = 0, size: int = TINY_IMAGE_SIZE) -> torch.Tensor:
    """Deterministic random `(num_images, 3, size, size)` pixel values.

    Args:
        num_images (`int`): how many images.
        seed (`int`, *optional*, defaults to 0): images with different seeds differ.
        size (`int`, *optional*, defaults to 16): height and width.

    Returns:
        `torch.Tensor`
    """
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(num_images, 3, size, size, generator=generator)
