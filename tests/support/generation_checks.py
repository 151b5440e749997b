"""Checks that several test modules run on their families: `generate` in every mode against transformers, beams
where upstream reorders a row's items, a short clip's encoder-cache hit, a checkpoint without an audio tower, bad
inputs refused clearly (then the model still exact).

Every check compares with the plain transformers class holding the same weights, never with vlmprep's own output.
"""

from __future__ import annotations

import pytest
import torch

from support.references import (
    SYSTEM,
    USER,
    Prompt,
    assert_close,
    assert_same_steps,
    generate_logits,
    reference_next_logits,
    uncached_logits,
)
from vlmprep.testing import AUDIO, IMAGE, TINY_VOCAB_SIZE, VisionRunCounter

GENERATION_MODES = {
    "greedy": {"do_sample": False},
    "sample": {"do_sample": True, "top_k": 5},
    "beams": {"do_sample": False, "num_beams": 3},
    "return_two": {"do_sample": True, "num_return_sequences": 2},
}
# Answers of text ids only: no special ids (placeholders), no padding, BOS or EOS (a chat turn must answer in full)
TEXT_ANSWERS = {"suppress_tokens": [0, 1, 2, *range(100, TINY_VOCAB_SIZE)]}


def assert_generate_matches_upstream(upstream, ours, inputs: dict, mode: str, max_new_tokens: int) -> None:
    """`generate` in `mode` (a key of `GENERATION_MODES`, sampling from the same seed) gives upstream's sequences and
    logits."""
    kwargs = {"max_new_tokens": max_new_tokens, "output_logits": True, "return_dict_in_generate": True}
    torch.manual_seed(1)
    expected = upstream.generate(**inputs, **kwargs, **GENERATION_MODES[mode])
    torch.manual_seed(1)
    actual = ours.generate(**inputs, **kwargs, **GENERATION_MODES[mode])
    assert torch.equal(actual.sequences, expected.sequences)
    assert_same_steps(actual.logits, expected.logits)


def assert_beams_exact_where_upstream_reorders_images(upstream, ours, upstream_order: str) -> None:
    """Beams over two images start from the prompt's logits, where upstream's expansion feeds the images in
    `upstream_order` (e.g. "A, A, B, B") and so differs."""
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER, IMAGE, [30]], image_seeds=[0, 1])
    reference = reference_next_logits(upstream, prompt)
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, num_beams=3)
    for beam in range(3):  # every beam starts from the prompt: its first logits are the prompt's
        assert_close(logits[0][beam], reference[0])
    _, upstream_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=1, num_beams=3)
    assert not torch.allclose(upstream_logits[0][1], reference[0], atol=1e-4), f"upstream feeds {upstream_order}"


def assert_short_clip_hits_the_encoder_cache(upstream, ours, system: list[int] = SYSTEM) -> None:
    """The shortest clip (seed 3) after `system`, encoded alone, is a cache hit when it comes again batched with a
    longer clip."""
    short_clip = Prompt(ours.config, [system, AUDIO, [30]], image_seeds=[3])
    both = Prompt(ours.config, [system, AUDIO, [30], AUDIO, [31]], image_seeds=[0, 3])
    generate_logits(ours, short_clip.inputs(), max_new_tokens=1)
    with VisionRunCounter(ours) as runs:
        _, logits = generate_logits(ours, both.inputs(), max_new_tokens=1)
    assert runs.batch_sizes == [1], "only the new clip is encoded: the short one is a cache hit"
    assert_close(logits[0], uncached_logits(upstream, both.inputs()))


def assert_exact_without_an_audio_tower(upstream, ours, system: list[int] = SYSTEM) -> None:
    """A drop-in given the weights of an upstream model without an audio tower is exact on images after `system`,
    and refuses a clip clearly."""
    ours.load_state_dict(upstream.state_dict())
    prompt = Prompt(ours.config, [system, IMAGE, [30, 31]], image_seeds=[1])
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1)
    assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))
    with_audio = Prompt(ours.config, [system, AUDIO, [30]], image_seeds=[0])
    with pytest.raises(ValueError, match="no audio tower"):
        ours.generate(**with_audio.inputs(), max_new_tokens=1)


def assert_bad_clips_refused_then_exact(upstream, ours, inputs: dict, features_key: str, mask_key: str, more=()):
    """A clip's run without its features, two clips for one run, a mask with fewer real frames (or samples) than the
    run, and the family's own `more` `(bad inputs, message)` pairs are each refused with an error saying what is
    wrong; the model is still exact afterwards."""
    shorter_mask = inputs[mask_key].clone()
    shorter_mask[:, int(shorter_mask.sum(-1).min()) // 2 :] = 0  # the clip's run is longer than its real frames give
    two_clips = {key: torch.cat([inputs[key], inputs[key]]) for key in (features_key, mask_key)}
    bad = [
        ({k: v for k, v in inputs.items() if k != features_key}, "no pixel inputs were passed"),
        ({**inputs, **two_clips}, r"2 audio\(s\) were passed but the prompt has 1 audio placeholder run"),
        ({**inputs, mask_key: shorter_mask}, "more audio placeholder tokens than"),
        *more,
    ]
    assert_refused_then_exact(upstream, ours, inputs, bad)


def assert_refused_then_exact(upstream, ours, inputs: dict, bad: list[tuple[dict, str]]) -> None:
    """Each of the `(bad inputs, message)` pairs is refused with a `ValueError` matching its message; the model is
    still exact on `inputs` afterwards."""
    for bad_inputs, message in bad:
        with pytest.raises(ValueError, match=message):
            ours.generate(**bad_inputs, max_new_tokens=1)
    _, logits = generate_logits(ours, inputs, max_new_tokens=1)
    assert_close(logits[0], uncached_logits(upstream, inputs))
