"""Waveform audio clips (Muse Spark) in the engine: `test_audio_requests.py`'s requests (a clip alone, after an image,
before a video) answer exactly as the plain class's `generate` does, with a budget that splits clips across steps."""

from __future__ import annotations

import pytest
from test_audio_requests import test_audio_requests_in_the_engine as _audio_requests

WAVEFORM_FAMILIES = ["muse_spark"]


@pytest.mark.parametrize("family", WAVEFORM_FAMILIES)
def test_waveform_requests_in_the_engine(family):
    _audio_requests(family)
