"""LLaVA-like families with one sub-image per item in `(batch, sub-images, C, H, W)`: Idefics3, SmolVLM and Idefics2.

Token ids follow `vlmprep.testing`: vocabulary 128, image placeholder 122, other special tokens 110-121, text 3..99.
Placeholder counts follow each processor's own arithmetic (called on a stand-in where the processor can be imported),
never the drop-in under test. Shared pieces (seeded images, prompts, batches): `llava_like_inputs.py`.
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.llava_like_inputs import pixels, prompt_ids, tile_pixels, tiles_of

# -- Idefics3 and SmolVLM: sub-images in (batch, sub-images, C, H, W) -------------------------------------------------

FAKE_AROUND_IMAGE, GLOBAL_IMG, ROW_COL_TAG, NEWLINE = 112, 113, 114, 9


def idefics3_image_tokens(config, sub_images: int) -> list[int]:
    """`Idefics3Processor.replace_image_token`: one row of `sub_images - 1` crops (each behind its row/col tag), then
    the global image; every sub-image is a run of `image_seq_len` placeholders."""
    vision = config.vision_config
    run = [config.image_token_id] * ((vision.image_size // vision.patch_size) ** 2 // config.scale_factor**2)
    global_image = [FAKE_AROUND_IMAGE, GLOBAL_IMG, *run, FAKE_AROUND_IMAGE]
    if sub_images == 1:
        return global_image
    crops = [token for _ in range(sub_images - 1) for token in [FAKE_AROUND_IMAGE, ROW_COL_TAG, *run]]
    return [*crops, NEWLINE, NEWLINE, *global_image]


def build_idefics3_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """One sample: its sub-images (crops, then the global image) and their pixel masks.

    The global image is the whole image resized to fit, so its last 4 pixel columns are padding (0, masked).
    """
    runs = [idefics3_image_tokens(config, tiles_of(seed)) for seed in image_seeds]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        pixel_values = tile_pixels(config, image_seeds)  # (sub-images, C, H, W)
        mask = torch.ones(pixel_values.shape[0], *pixel_values.shape[2:], dtype=torch.long)
        global_rows = torch.tensor([tiles_of(seed) for seed in image_seeds]).cumsum(0) - 1
        mask[global_rows, :, -4:] = 0
        pixel_values[global_rows, :, :, -4:] = 0.0
        inputs["pixel_values"] = pixel_values.unsqueeze(0)  # (1, sub-images, C, H, W)
        inputs["pixel_attention_mask"] = mask.unsqueeze(0)
    return inputs


# -- Idefics2: one sub-image per image, or five with `do_image_splitting` -----------------------------------------------


def idefics2_sub_images(seed: int) -> int:
    """Five sub-images (four crops, then the whole image) for the seeds `tiles_of` gives several tiles, else one."""
    return 1 if tiles_of(seed) == 1 else 5


def idefics2_image_tokens(config, sub_images: int) -> list[int]:
    """`Idefics2Processor.__call__`: each sub-image a run of `image_seq_len` (the perceiver's latents) placeholders
    between `<fake_token_around_image>` tokens, the doubled fake tokens between runs collapsed into one."""
    run = [config.image_token_id] * config.perceiver_config.resampler_n_latents
    return [token for _ in range(sub_images) for token in [FAKE_AROUND_IMAGE, *run]] + [FAKE_AROUND_IMAGE]


def build_idefics2_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    counts = [idefics2_sub_images(seed) for seed in image_seeds]
    runs = [idefics2_image_tokens(config, count) for count in counts]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        size = config.vision_config.image_size
        pixel_values = torch.cat(
            [pixels((count, 3, size, size), seed) for count, seed in zip(counts, image_seeds, strict=True)]
        )
        inputs["pixel_values"] = pixel_values.unsqueeze(0)  # (1, sub-images, C, H, W)
        inputs["pixel_attention_mask"] = torch.ones(1, pixel_values.shape[0], size, size, dtype=torch.long)
    return inputs


register(
    FamilyCase(
        "idefics2",
        build_idefics2_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "pixel_attention_mask"),
    )
)


# SmolVLM's processor writes images exactly as Idefics3's.
for name in ("idefics3", "smolvlm"):
    register(
        FamilyCase(
            name,
            build_idefics3_inputs,
            per_token_keys=(),
            pixel_keys=("pixel_values", "pixel_attention_mask"),
            samples=("chat", "text_only_refusal") if name == "idefics3" else (),
        )
    )
