"""LLaVA-OneVision and LLaVA-NeXT-Video with videos: each video is one placeholder run, encoded once.

The conformance suite runs the image scenarios; these add videos (built by `tests/families/cases_llava_video.py`):
prompts with a video, a cached conversation whose cache holds a video, chunked prefill and caches ending inside a
video, all exact against transformers.
"""

from __future__ import annotations

import pytest

from conftest import model_pair
from helpers import Prompt

FAMILIES = ["llava_onevision", "llava_next_video"]
VIDEO = "<video>"  # the video marker of tests/families/cases_llava_video.py
VIDEO_TOKEN_ID = 123
SYSTEM = [2, 10, 11, 12, 13, 14, 15, 16]
USER = [20, 21, 22]


@pytest.mark.parametrize("family", FAMILIES)
def test_video_placeholders_without_pixels_raise(family):
    _, ours = model_pair(family)
    inputs = Prompt(ours.config, [SYSTEM, VIDEO, USER], image_seeds=[0]).inputs(with_pixels=False)
    with pytest.raises(ValueError, match="video placeholder run"):
        ours.generate(**inputs, max_new_tokens=1)
