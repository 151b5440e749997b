"""LLaVA-OneVision, LLaVA-NeXT-Video and Video-LLaVA with videos: the image builders of `cases_llava_anyres.py` and
`cases_fixed_size.py`, plus videos.

The cases registered by `cases_llava_anyres.py` and `cases_fixed_size.py` (loaded first) are registered again with builders that also place
videos (a `VIDEO` segment); image-only prompts are built exactly as before, so the conformance suite is unchanged.
A video is `(frames, C, H, W)` of one crop size; it has one placeholder run whose length follows each processor's
`replace_video_token` arithmetic (recomputed here, never asked of the drop-in under test).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from support.cases import FAMILY_CASES, register
from vlmprep.testing import IMAGE, TINY_VIDEO_TOKEN_ID, VIDEO

VIDEO_FRAMES = 4  # one count for every video: the processor stacks videos into one `(videos, frames, ...)` tensor


def video_tokens(config) -> int:
    """Placeholders of one video, as the family's processor writes them."""
    patches = config.vision_config.image_size // config.vision_config.patch_size  # per side, one frame
    if config.model_type == "llava_onevision":
        pooled = math.ceil(patches / 2)
        return VIDEO_FRAMES * pooled * pooled + 1  # +1: the newline token after the frames
    if config.model_type == "video_llava":
        return VIDEO_FRAMES * (patches * patches + 1)  # every frame's patches and its CLS token, unpooled
    return patches * patches // 4 * VIDEO_FRAMES  # LLaVA-NeXT-Video: 2x2 average pooling per frame


def video_pixels(config, seed: int) -> torch.Tensor:
    size = config.vision_config.image_size
    generator = torch.Generator().manual_seed(1000 + seed)
    return torch.randn(VIDEO_FRAMES, 3, size, size, generator=generator)


def with_videos(build_images):
    """A builder that places videos: images (in order) by `build_images`, each `VIDEO` as its placeholder run.

    The seeds of `image_seeds` go to the images and videos in prompt order.
    """

    def build_inputs(config, segments: list, image_seeds: list[int]) -> dict:
        media = [segment for segment in segments if not isinstance(segment, list)]
        if VIDEO not in media:
            return build_images(config, segments, image_seeds)
        video_seeds = [seed for segment, seed in zip(media, image_seeds, strict=True) if segment == VIDEO]
        seeds = [seed for segment, seed in zip(media, image_seeds, strict=True) if segment is IMAGE]
        image_segments = [segment for segment in segments if segment != VIDEO]
        inputs = build_images(config, image_segments, seeds)
        # Image-only ids; rebuild them with each video's run in its place.
        image_ids = inputs["input_ids"][0].tolist()
        ids: list[int] = []
        position = 0
        for segment in segments:
            if segment == VIDEO:
                ids += [TINY_VIDEO_TOKEN_ID] * video_tokens(config)
                continue
            if segment is IMAGE:
                end = position
                while end < len(image_ids) and image_ids[end] == config.image_token_id:
                    end += 1
            else:
                end = position + len(segment)
            ids += image_ids[position:end]
            position = end
        inputs["input_ids"] = torch.tensor([ids])
        inputs["pixel_values_videos"] = torch.stack([video_pixels(config, seed) for seed in video_seeds])
        return inputs

    return build_inputs


for family in ("llava_onevision", "llava_next_video", "video_llava"):
    case = FAMILY_CASES[family]
    register(
        dataclasses.replace(
            case,
            build_inputs=with_videos(case.build_inputs),
            pixel_keys=(*case.pixel_keys, "pixel_values_videos"),
        )
    )
