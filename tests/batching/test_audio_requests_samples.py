"""Waveform audio clips (Muse Spark, Apertus 1.5) in the engine: requests with clips (alone, after an image, one clip
in two requests, and for Muse Spark before a video) answer exactly as the plain class's `generate` does, with a
budget that splits clips across steps."""

from __future__ import annotations

from cb_models import (
    assert_engine_matches_references,
    cb_pair,
)
from test_audio_requests import test_audio_requests_in_the_engine as _audio_requests

from support.registry import FAMILY_CASES
from vlmprep.testing import AUDIO, IMAGE


def test_muse_spark_requests_in_the_engine():
    _audio_requests("muse_spark")


def test_apertus1p5_requests_in_the_engine():
    upstream, ours = cb_pair("apertus1p5")
    build, config = FAMILY_CASES["apertus1p5"].build_inputs, upstream.config
    requests = [
        build(config, [[3, 4, 5], AUDIO, [6, 7]], [1]),
        [8, 9, 10, 11],
        build(config, [[3], IMAGE, [12], AUDIO, [13, 14]], [2, 3]),  # an image of 4 rows: 4 runs
        build(config, [[15, 16], AUDIO, [17]], [1]),  # the first request's clip again
    ]
    assert_engine_matches_references(upstream, ours, requests, 4, max_batch_tokens=8)
