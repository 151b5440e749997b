"""Shared pieces of the LLaVA-like family cases (`tests/support/families/cases_llava_*.py`, `cases_fixed_size.py`): images
drawn from a seed, and prompts and batches as the families' processors build them. Their tiny configs are the
registry's (`vlmprep.testing.configs`).

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
Image sizes and tile counts are functions of the image seed (`size_of`, `tiles_of`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from vlmprep.testing import IMAGE, random_pixels

# -- Images drawn from a seed -----------------------------------------------------------------------------------------


def size_of(seed: int, sizes: list[tuple[int, int]]) -> tuple[int, int]:
    """The size of the image drawn with `seed`; sizes repeat every 7 seeds.

    Seed 7 must have seed 0's size: `test_image_already_in_cache_is_not_encoded` measures turn 1 with the default
    image seed (0) but builds the conversation with seed 7, so it assumes both images have the same token count.
    """
    return sizes[seed % 7 % len(sizes)]


def tiles_of(seed: int) -> int:
    """Tiles (or sub-images) of the image drawn with `seed`, its global view included: 3 for seeds 2, 6, 9, 13, ...

    Scenarios that count encoded images (`VisionRunCounter.images`, which counts tower rows: tiles) use seeds 0, 1,
    3, 4, 5, 7 and 8, so their images are single tiles; the chunked batch (seed 2) and the interleaved requests
    (seed 13) have multi-tile images.
    """
    return 3 if seed % 7 in (2, 6) else 1


def pixels(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def tile_pixels(config, image_seeds: list[int]) -> torch.Tensor:
    """`(total_tiles, C, H, W)`: the tiles of every image, in prompt order."""
    size = config.vision_config.image_size
    height, width = (size, size) if isinstance(size, int) else size  # InternVL states `[height, width]`
    return torch.cat([pixels((tiles_of(seed), 3, height, width), seed) for seed in image_seeds])


def square_pixels(side: int) -> Callable[[int, int], torch.Tensor]:
    """`(count, seed) -> (count, 3, side, side)` pixels drawn with `seed`."""
    return lambda count, seed: pixels((count, 3, side, side), seed)


def global_and_local_views(
    image_seeds: list[int],
    global_views: Callable[[int, int], torch.Tensor],
    local_views: Callable[[int, int], torch.Tensor],
) -> tuple[dict[str, torch.Tensor], list[int]]:
    """Each image's global view, and its `tiles_of(seed) - 1` local crops (drawn with `seed + 1000`), as the
    global-and-crops families (Step-3.7, Unlimited-OCR, DeepSeek-OCR-2) take them.

    Args:
        global_views: `(1, seed) -> (1, 3, H, W)` pixels.
        local_views: `(count, seed) -> (count, 3, h, w)` pixels.

    Returns:
        `pixel_values` (when there are images) and, when any image has crops, `pixel_values_local`; each image's
        crop count.
    """
    if not image_seeds:
        return {}, []
    crops = [tiles_of(seed) - 1 for seed in image_seeds]
    inputs = {"pixel_values": torch.cat([global_views(1, seed) for seed in image_seeds])}
    if sum(crops):
        local = [local_views(count, seed + 1000) for seed, count in zip(image_seeds, crops, strict=True) if count]
        inputs["pixel_values_local"] = torch.cat(local)
    return inputs, crops


# -- Prompts and batches ----------------------------------------------------------------------------------------------


def prompt_ids(segments: list, image_token_runs: list[list[int]]) -> list[int]:
    """Text segments and images, each image replaced by its tokens (in order)."""
    ids: list[int] = []
    runs = iter(image_token_runs)
    for segment in segments:
        ids += next(runs) if segment is IMAGE else list(segment)
    return ids


def build_patch_run_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """One fixed-size image per run of `(image_size / patch_size) ** 2` placeholders; `pixel_values` is
    `(images, C, H, W)`.

    As the processors of VipLLaVA, DeepSeek-VL (`num_image_tokens`, the SigLIP patch count) and Video-LLaVA (patches
    plus the CLS token, minus 1 for "default"; `pixel_values` as returned with `return_legacy_image_output=False`)
    write them.
    """
    vision = config.vision_config
    run = [config.image_token_id] * (vision.image_size // vision.patch_size) ** 2
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [run] * len(image_seeds))])}
    if image_seeds:
        inputs["pixel_values"] = torch.cat([random_pixels(1, seed) for seed in image_seeds])
    return inputs


def left_pad(value: torch.Tensor, width: int, fill: int) -> torch.Tensor:
    return torch.nn.functional.pad(value, (width - value.shape[-1], 0), value=fill)


def pad_dim(value: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """Zero-pad `value` along `dim` to `size` (processors pad per-image stacks to the batch's largest)."""
    missing = size - value.shape[dim]
    if missing == 0:
        return value
    shape = list(value.shape)
    shape[dim] = missing
    return torch.cat([value, value.new_zeros(shape)], dim=dim)
