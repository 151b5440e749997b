"""InstructBLIP-Video: a family with videos only. A video's features depend on its frames, in order, and on its
instruction (`qformer_input_ids`): both are part of its identity in the encoder cache and the prefix store. Encoder work
is counted with a forward hook on the vision tower (frames) and on `get_video_features` (calls)."""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from support.references import next_logits, uncached_logits, with_encoder_cache
from vlmprep import PrefixCache
from vlmprep.generation import VisionFacts
from vlmprep.testing import VisionRunCounter, random_pixels
from vlmprep.testing.configs.ivideo import TINY_VIDEO_FRAMES

VIDEO_TOKEN = 123
RUN = [VIDEO_TOKEN] * (4 * TINY_VIDEO_FRAMES)
PROMPT = torch.tensor([[1, 5, 6, *RUN, 7, 8, 9]])


def _inputs(instruction: list[int], video: torch.Tensor | None = None, prompt: torch.Tensor = PROMPT) -> dict:
    return {
        "input_ids": prompt,
        "attention_mask": torch.ones_like(prompt),
        "pixel_values": random_pixels(TINY_VIDEO_FRAMES, seed=4)[None] if video is None else video,
        "qformer_input_ids": torch.tensor([instruction]),
        "qformer_attention_mask": torch.ones(1, len(instruction), dtype=torch.long),
    }


class FramesEncoded:
    """Counts the frames the vision tower runs on, with a forward hook (each call's batch is its frames)."""

    def __init__(self, model):
        self.tower, self.frames = model.vision_model, []

    def __enter__(self):
        self.handle = self.tower.register_forward_hook(
            lambda _, args, kwargs, out: self.frames.append(
                int(kwargs.get("pixel_values", args[0] if args else None).shape[0])
            ),
            with_kwargs=True,
        )
        return self

    def __exit__(self, *exc):
        self.handle.remove()


@pytest.fixture
def models():
    upstream, ours = model_pair("instructblipvideo")
    with with_encoder_cache(ours):
        yield upstream, ours


def test_facts_without_images_have_only_the_video_modality():
    assert [m.name for m in VisionFacts().modalities] == ["image"]  # every other family: images first, unchanged
    _, ours = model_pair("instructblipvideo")
    assert [m.name for m in ours.vision_facts.modalities] == ["video"]
    assert not hasattr(ours.config, "image_token_id")


def test_video_encoded_once_per_instruction_and_frames(models):
    upstream, ours = models
    video = random_pixels(TINY_VIDEO_FRAMES, seed=4)[None]
    swapped = video.flip(1)  # the same frames in the other order
    other_frame = torch.cat([video[:, :1], random_pixels(1, seed=9)[None]], dim=1)  # its last frame replaced
    cases = [_inputs([5, 6, 7], v) for v in (video, swapped, other_frame)]
    cases = [cases[0], _inputs([8, 9, 10], video), *cases[1:], _inputs([5, 6, 7])]
    expected = [uncached_logits(upstream, inputs) for inputs in cases]
    assert (expected[0] - expected[1]).abs().max() > 1e-3  # the instruction changes upstream's logits
    assert (expected[0] - expected[3]).abs().max() > 1e-3  # so does one frame
    # and the frames' order, by much less on the tiny model (only the frames' positions change), but 5x the tolerance
    assert (expected[0] - expected[2]).abs().max() > 5e-5
    calls, frames = [], []
    for inputs, reference in zip(cases, expected, strict=True):
        with VisionRunCounter(ours) as runs, FramesEncoded(ours) as tower:
            torch.testing.assert_close(next_logits(ours, inputs), reference, atol=1e-5, rtol=0)
        calls.append(runs.calls)
        frames.append(sum(tower.frames))
    # Encoded once per (frames, instruction); the first pair again comes from the encoder cache
    assert calls == [1, 1, 1, 1, 0]
    assert frames == [TINY_VIDEO_FRAMES] * 4 + [0]


def test_prefix_store_reuses_the_same_video_and_instruction_only(models):
    upstream, ours = models
    store = PrefixCache()
    first = _inputs([5, 6, 7])
    next_logits(ours, first, prefix_cache=store)
    longer = torch.cat([PROMPT, torch.tensor([[10, 11]])], dim=1)
    follow_up = _inputs([5, 6, 7], prompt=longer)
    with FramesEncoded(ours) as tower:
        logits = next_logits(ours, follow_up, prefix_cache=store)
    torch.testing.assert_close(logits, uncached_logits(upstream, follow_up), atol=1e-5, rtol=0)
    assert tower.frames == [] and store.stats.hits == 1  # the video's KV came from the store
    other = _inputs([8, 9, 10], prompt=longer)
    logits = next_logits(ours, other, prefix_cache=store)
    torch.testing.assert_close(logits, uncached_logits(upstream, other), atol=1e-5, rtol=0)


def test_caption_without_prompt_matches_upstream_generate(models):
    upstream, ours = models
    inputs = _inputs([5, 6, 7])
    video_only = {key: inputs[key] for key in ("pixel_values", "qformer_input_ids", "qformer_attention_mask")}
    # upstream writes 4 frames' placeholders: a video of 4 frames
    video_only["pixel_values"] = random_pixels(4, seed=2)[None]
    expected = upstream.generate(**video_only, max_new_tokens=3, do_sample=False)
    ours_ids = ours.generate(**video_only, max_new_tokens=3, do_sample=False)
    assert ours_ids[:, -3:].tolist() == expected[:, -3:].tolist()


def test_bad_video_inputs_are_refused(models):
    _, ours = models
    inputs = _inputs([5, 6, 7])
    inputs["pixel_values"] = inputs["pixel_values"][0]  # (frames, C, H, W): a video without its video dimension
    with pytest.raises(ValueError, match=r"num_videos, frames, 3"):
        ours.generate(**inputs, max_new_tokens=1)
    inputs = _inputs([5, 6, 7])
    inputs.pop("qformer_input_ids")
    with pytest.raises(ValueError, match="one row of Q-Former ids per video"):
        ours.generate(**inputs, max_new_tokens=1)
