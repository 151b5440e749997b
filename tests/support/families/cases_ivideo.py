"""InstructBLIP-Video: prompts and pixel inputs as its processor builds them.

Each video (the suite's `IMAGE` segments stand for videos here) is one run of `num_query_tokens * frames` video
placeholders; `pixel_values` is `(videos, frames, C, H, W)`, and each video's instruction for the Q-Former comes as
Q-Former ids, one row per video (InstructBLIP's: the prompt's last text tokens before it, padded).
"""

from __future__ import annotations

import torch

from support.cases import FamilyCase, register
from support.families.cases_qformer import _TEXT_PREFIX_SKIP, instructions_of
from support.llava_like_inputs import global_and_local_views, prompt_ids
from vlmprep.testing import random_pixels
from vlmprep.testing.configs.ivideo import TINY_VIDEO_FRAMES


def build_video_inputs(config, segments: list, video_seeds: list[int]) -> dict:
    """One tiny video of `TINY_VIDEO_FRAMES` frames per run, and one instruction row per video."""
    run = [config.video_token_id] * (config.num_query_tokens * TINY_VIDEO_FRAMES)
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, [run] * len(video_seeds))])}
    if video_seeds:
        # (videos, frames, C, H, W); each frame its own draw, so frame order matters
        inputs["pixel_values"] = torch.stack([random_pixels(TINY_VIDEO_FRAMES, seed) for seed in video_seeds])
        ids, masks = instructions_of(segments)
        inputs["qformer_input_ids"] = torch.tensor(ids)
        inputs["qformer_attention_mask"] = torch.tensor(masks)
    return inputs


register(
    FamilyCase(
        "instructblipvideo",
        build_video_inputs,
        unread_inputs=frozenset({"decoder_input_ids", "decoder_attention_mask", "interpolate_pos_encoding"}),
        per_token_keys=(),
        pixel_keys=("pixel_values", "qformer_input_ids", "qformer_attention_mask"),
        upstream_needs_items=True,
        skip=_TEXT_PREFIX_SKIP,
    )
)


# Placeholders of one DeepSeek-OCR-2 view: the tower's 144 learned queries for small grids, whatever the config.
OCR2_VIEW_TOKENS = 144
# Every view fills 144 placeholders, so a two-image prompt is ~300 tokens: sweeping every length is minutes here.
_OCR2_LONG = (
    "its views fill 144 placeholders whatever the config, so its prompts are ~300 tokens and this scenario's many "
    "chunked prefills take minutes here; `make test` runs chunk sizes and cached lengths at each image's start, middle "
    "and end (test_chunked_prefill.py::test_sampled_chunk_sizes_and_cached_lengths)"
)
OCR2_SLOW = {
    "every_chunk_size_is_exact": _OCR2_LONG,
    "cached_prefix_of_every_length_with_chunks": _OCR2_LONG,
    "chunked_batch_matches_unchunked_batch": _OCR2_LONG,
}


# DeepSeek-OCR-2's crops: seeds with `tiles_of(seed) == 3` get two 16x16 crops, the others none.
def build_deepseek_ocr2_inputs(config, segments: list, image_seeds: list[int]) -> dict:
    """Ids with each image's one run (its crops' queries, its global view's, the separator); `pixel_values`
    `(images, 3, 16, 16)`, `pixel_values_local` `(crops, 3, 16, 16)` when any image has crops, `num_local_patches`."""
    views, crops = global_and_local_views(image_seeds, random_pixels, random_pixels)
    runs = [[config.image_token_id] * (OCR2_VIEW_TOKENS * (count + 1) + 1) for count in crops]
    inputs = {"input_ids": torch.tensor([prompt_ids(segments, runs)])}
    if image_seeds:
        inputs.update(views, num_local_patches=torch.tensor(crops))
    return inputs


register(
    FamilyCase(
        "deepseek_ocr2",
        build_deepseek_ocr2_inputs,
        per_token_keys=(),
        pixel_keys=("pixel_values", "pixel_values_local", "num_local_patches"),
        skip={"bad_input_wrong_resolution": "views of any size are taken (the query count follows the grid)"},
        slow=OCR2_SLOW,
    )
)
