"""The Granite families whose vision features are also summed in at several decoder layers (deepstack): Granite 4
Vision (any-res crops, as LLaVA-NeXT's; `(decoder layer, features)` pairs, placeholders zeroed) and Granite Docling
(masked tiles, a run per tile; one deepstack entry per layer).

Token ids follow `vlmprep.testing`; placeholder counts follow each processor's own arithmetic, never the drop-in.
"""

from __future__ import annotations

import torch
import transformers

from support.cases import FamilyCase, register
from support.families.cases_llava_anyres import anyres_inputs, processor_features
from support.llava_like_inputs import prompt_ids, tile_pixels, tiles_of

FAKE_AROUND_IMAGE, GLOBAL_IMG, FIRST_ROW_COL_TAG, NEWLINE = 112, 113, 114, 9


def granite4_vision_tokens(config, image_size: tuple[int, int]) -> int:
    """`Granite4VisionProcessor`'s count: LLaVA-NeXT's over crops downsampled by `downsample_rate` (CLIP's CLS token
    counted, then dropped by the "default" feature strategy)."""
    attributes = {
        "patch_size": config.vision_config.patch_size,
        "num_additional_image_tokens": 1,
        "downsample_rate": config.downsample_rate,
    }
    return processor_features(transformers.Granite4VisionProcessor, config, image_size, **attributes)


# Upstream's beams with two images in a row are wrong for these families: checked in tests/scenarios/test_deepstack_pairs.py
UPSTREAM_BEAM_SKIP = {
    "generate_matches_transformers": (
        "transformers 5.24's `_expand_multimodal_outputs` of the deepstack pairs repeats a row's features image by "
        "image ([A, A, B, B]) instead of copy by copy, so upstream's beams and num_return_sequences with two images "
        "in a prompt are wrong; greedy and sampling parity and exact beams are checked in "
        "tests/scenarios/test_deepstack_pairs.py"
    ),
}

register(
    FamilyCase(
        "granite4_vision",
        anyres_inputs(granite4_vision_tokens),
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_sizes"),
        skip=UPSTREAM_BEAM_SKIP,
    )
)


def granite_docling_image_tokens(config, tiles: int, fine: bool = False) -> list[int]:
    """`GraniteDoclingProcessor.replace_image_token`: a grid of one row of tiles (each behind its `<row_1_col_j>` tag,
    the row ended by a newline), then, for a grid of several tiles, a newline and the global image; every tile a run
    of `image_seq_len` placeholders (four times as many on the fine path)."""
    vision = config.vision_config
    seq_len = (vision.image_size // vision.patch_size) ** 2 // vision.scale_factor**2
    run = [config.image_token_id] * (seq_len * (4 if fine else 1))
    grid = 1 if tiles == 1 else tiles - 1
    ids = [token for col in range(grid) for token in [FAKE_AROUND_IMAGE, FIRST_ROW_COL_TAG + col, *run]] + [NEWLINE]
    if grid > 1:
        ids += [NEWLINE, FAKE_AROUND_IMAGE, GLOBAL_IMG, *run, FAKE_AROUND_IMAGE]
    return ids


def build_granite_docling_inputs(config, segments: list, image_seeds: list[int], fine: bool = False) -> dict:
    """One sample: its tiles (the grid, then the global image) and the per-tile mask the processor returns."""
    runs = [granite_docling_image_tokens(config, tiles_of(seed), fine) for seed in image_seeds]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        pixel_values = tile_pixels(config, image_seeds)  # (tiles, C, H, W)
        inputs["pixel_values"] = pixel_values.unsqueeze(0)  # (1, tiles, C, H, W)
        inputs["pixel_attention_mask"] = torch.ones(1, pixel_values.shape[0], dtype=torch.bool)
        if fine:
            inputs["tile_fine_mask"] = torch.ones(1, dtype=torch.bool)
    return inputs


register(
    FamilyCase(
        "granite_docling",
        build_granite_docling_inputs,
        unread_inputs=frozenset({"router_labels"}),
        per_token_keys=(),
        pixel_keys=("pixel_values", "pixel_attention_mask"),
    )
)
