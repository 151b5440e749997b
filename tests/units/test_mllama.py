"""Llama 3.2 Vision (mllama) beyond the conformance matrix: images once across calls, caller caches of whole turns,
chunks, and the calls the drop-in refuses. The reference is always transformers' class: one uncached forward of the
whole prompt."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from conftest import model_pair
from support.families.cases_cross_attention import build_mllama_inputs
from vlmprep import MllamaForConditionalGeneration, PrefixCache
from vlmprep.batching.support import check_batching_support
from vlmprep.testing import IMAGE, PrefillCounter

GREEDY = {"do_sample": False, "output_logits": True, "return_dict_in_generate": True}
BOS, HEADER = [1], [110, 5, 111, 6]  # text before the first image, as Llama 3.2's chat template writes it


class TowerRuns:
    """Images through the vision tower, counted by a forward hook on it (`pixel_values` `(batch, images, ...)`)."""

    def __init__(self, model):
        self.images = 0
        self._handle = model.model.vision_model.register_forward_hook(self._count, with_kwargs=True)

    def _count(self, module, args, kwargs, output):
        pixel_values = kwargs.get("pixel_values", args[0] if args else None)
        self.images += pixel_values.shape[0] * pixel_values.shape[1]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.remove()


def _inputs(config, segments: list, seeds: list[int]) -> dict:
    return build_mllama_inputs(config, segments, seeds)


def _left_padded(value: torch.Tensor, pad: int, axis: int = -1) -> torch.Tensor:
    padding = [0, 0] * (value.ndim - 1 - axis % value.ndim) + [pad, 0]
    return torch.nn.functional.pad(value, padding)


def _reference(upstream, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        return upstream(**inputs, use_cache=False).logits[:, -1]


def _assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)


def test_the_drop_in_is_loaded_and_images_change_the_logits():
    upstream, ours = model_pair("mllama")
    assert type(ours) is MllamaForConditionalGeneration
    segments = [BOS + HEADER, IMAGE, [7, 8, 9]]
    first, second = _inputs(ours.config, segments, [3]), _inputs(ours.config, segments, [4])
    expected_first, expected_second = _reference(upstream, first), _reference(upstream, second)
    assert not torch.allclose(expected_first, expected_second, atol=1e-4)  # a tiny model that can fail
    _assert_close(ours.generate(**first, max_new_tokens=1, **GREEDY).logits[0], expected_first)
    _assert_close(ours.generate(**second, max_new_tokens=1, **GREEDY).logits[0], expected_second)


def test_each_image_is_encoded_once_across_calls():
    upstream, ours = model_pair("mllama")
    inputs = _inputs(ours.config, [BOS + HEADER, IMAGE, [7, 8], IMAGE, [9, 10]], [5, 6])
    expected = upstream.generate(**inputs, max_new_tokens=4, **GREEDY)
    with TowerRuns(ours) as runs:
        first = ours.generate(**inputs, max_new_tokens=4, **GREEDY)
        assert runs.images == 2
        second = ours.generate(**inputs, max_new_tokens=4, **GREEDY)
        assert runs.images == 2  # the encoder cache holds both
    for output in (first, second):
        assert torch.equal(output.sequences, expected.sequences)
        for step, expected_step in zip(output.logits, expected.logits, strict=True):
            _assert_close(step, expected_step)


def test_a_repeated_image_is_encoded_once_in_one_call():
    upstream, ours = model_pair("mllama")
    inputs = _inputs(ours.config, [BOS, IMAGE, [7], IMAGE, [9]], [8, 8])
    with TowerRuns(ours) as runs:
        logits = ours.generate(**inputs, max_new_tokens=1, **GREEDY).logits[0]
    assert runs.images == 1
    _assert_close(logits, _reference(upstream, inputs))


@pytest.mark.parametrize("leading_text", [True, False], ids=["text_before_image", "image_first"])
def test_every_chunk_size_is_exact(leading_text):
    upstream, ours = model_pair("mllama")
    start = BOS + HEADER if leading_text else []
    segments = [*([start] if start else []), IMAGE, [*([] if leading_text else BOS), 7, 8, 9], IMAGE, [10, 11]]
    inputs = _inputs(ours.config, segments, [1, 2])
    expected = upstream.generate(**inputs, max_new_tokens=3, **GREEDY)
    for chunk_size in range(1, inputs["input_ids"].shape[1] + 1):
        actual = ours.generate(**inputs, max_new_tokens=3, prefill_chunk_size=chunk_size, **GREEDY)
        assert torch.equal(actual.sequences, expected.sequences)
        for step, expected_step in zip(actual.logits, expected.logits, strict=True):
            _assert_close(step, expected_step)


def _turns(config, leading_text: bool):
    # Turn 1 with one image, turn 2 (its answer, then a question) with a second one; turn 3 text only
    first = [BOS + HEADER, IMAGE, [7, 8]] if leading_text else [[], IMAGE, BOS + [7, 8]]
    if not leading_text:
        first = first[1:]  # the processor puts a leading image token before the BOS token
    second = [*first, [20, 21, 22], IMAGE, [23]]
    third = [*second, [30, 31, 32]]
    return [(_inputs(config, turn, seeds), seeds) for turn, seeds in ((first, [3]), (second, [3, 4]), (third, [3, 4]))]


@pytest.mark.parametrize("leading_text", [True, False], ids=["text_before_image", "image_first"])
def test_a_callers_cache_continues_across_turns(leading_text):
    upstream, ours = model_pair("mllama")
    turns = _turns(ours.config, leading_text)
    cache = DynamicCache(config=ours.config)
    fed = []
    with TowerRuns(ours) as runs, PrefillCounter(ours) as prefill:
        for inputs, _ in turns:
            before = len(prefill.lengths)
            logits = ours.generate(**inputs, cache=cache, max_new_tokens=1, **GREEDY).logits[0]
            _assert_close(logits, _reference(upstream, inputs))
            fed.append(sum(prefill.lengths[before:]))
            # The cache now holds the prompt: the next turn's prompt starts with it (max_new_tokens=1: no answer)
    assert runs.images == 2  # each image once (the first from the encoder cache when recomputed)
    lengths = [inputs["input_ids"].shape[1] for inputs, _ in turns]
    # Turn 2 adds an image: with text before the first image that text attends to every image, so the prompt is
    # recomputed from its start; a prompt starting with its image feeds only the new tokens
    assert fed[1] == (lengths[1] if leading_text else lengths[1] - lengths[0])
    assert fed[2] == lengths[2] - lengths[1]


def test_a_batch_of_rows_with_as_many_images_matches_transformers():
    upstream, ours = model_pair("mllama")
    one = _inputs(ours.config, [BOS + HEADER, IMAGE, [7, 8, 9]], [3])
    two = _inputs(ours.config, [BOS, IMAGE, [9, 10, 11, 12]], [4])
    width = max(one["input_ids"].shape[1], two["input_ids"].shape[1])
    rows = [one, two]
    pads = [width - row["input_ids"].shape[1] for row in rows]  # left padding, as the processor pads a batch
    padded = list(zip(rows, pads, strict=True))
    batch = {
        "input_ids": torch.cat([_left_padded(row["input_ids"], pad) for row, pad in padded]),
        "attention_mask": torch.cat([_left_padded(torch.ones_like(row["input_ids"]), pad) for row, pad in padded]),
        "cross_attention_mask": torch.cat([_left_padded(row["cross_attention_mask"], pad, 1) for row, pad in padded]),
    }
    for key in ("pixel_values", "aspect_ratio_ids", "aspect_ratio_mask"):
        batch[key] = torch.cat([one[key], two[key]])
    expected = upstream.generate(**batch, max_new_tokens=3, **GREEDY)
    actual = ours.generate(**batch, max_new_tokens=3, prefill_chunk_size=2, **GREEDY)
    assert torch.equal(actual.sequences, expected.sequences)
    for step, expected_step in zip(actual.logits, expected.logits, strict=True):
        _assert_close(step, expected_step)


def test_beams_and_samples_share_the_images():
    upstream, ours = model_pair("mllama")
    inputs = _inputs(ours.config, [BOS + HEADER, IMAGE, [7, 8, 9]], [5])
    for options in ({"num_beams": 2}, {"num_return_sequences": 2, "num_beams": 2}):
        expected = upstream.generate(**inputs, max_new_tokens=3, do_sample=False, **options)
        with TowerRuns(ours) as runs:
            actual = ours.generate(**inputs, max_new_tokens=3, do_sample=False, **options)
        assert torch.equal(actual, expected)
        assert runs.images <= 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda inputs: inputs.pop("aspect_ratio_ids"), "without `aspect_ratio_ids`"),
        (lambda inputs: inputs.pop("aspect_ratio_mask"), "without `aspect_ratio_mask`"),
        (lambda inputs: inputs.update(aspect_ratio_ids=torch.tensor([[1, 0]])), "padding image slots"),
        (lambda inputs: inputs.update(pixel_values=inputs["pixel_values"][:, :, :1]), "tiles per image"),
        (lambda inputs: inputs.update(input_ids=inputs["input_ids"].clamp(max=100)), "placeholder run"),
    ],
    ids=["no_aspect_ratio_ids", "no_aspect_ratio_mask", "padding_slot", "tiles", "image_without_token"],
)
def test_bad_input_is_refused_clearly(change, message):
    _, ours = model_pair("mllama")
    inputs = _inputs(ours.config, [BOS, IMAGE, [7], IMAGE, [9]], [3, 4])
    change(inputs)
    with pytest.raises(ValueError, match=message):
        ours.generate(**inputs, max_new_tokens=1)


def test_continuous_batching_is_refused_with_the_reason():
    _, ours = model_pair("mllama")
    with pytest.raises(ValueError, match="paged cache"):
        check_batching_support(ours)


ANSWER = 3  # tokens generated each turn


@pytest.mark.parametrize("leading_text", [False, True], ids=["image_first", "text_before_image"])
def test_a_five_turn_chat_with_two_images_and_a_prefix_cache(leading_text):
    """Images in turns 1 and 3; every turn exact against one uncached forward of its whole prompt, each image encoded
    once, and the tokens fed counted against the fewest an exact prefill can feed."""
    upstream, ours = model_pair("mllama")
    store = PrefixCache()
    user_turns = [([IMAGE], [3]), ([], []), ([IMAGE], [4]), ([], []), ([], [])]
    history = [BOS + HEADER] if leading_text else []
    seeds: list[int] = []
    fed, minimum, cached = 0, 0, 0
    with TowerRuns(ours) as runs:
        for turn, (images, turn_seeds) in enumerate(user_turns):
            text = [10 + turn, 11 + turn, 12 + turn]
            if not leading_text and turn == 0:
                text = BOS + text  # the processor puts the leading image token before the BOS token
            history = [*history, *images, text]
            seeds = [*seeds, *turn_seeds]
            inputs = _inputs(ours.config, history, seeds)
            with PrefillCounter(ours) as prefill:
                output = ours.generate(
                    **inputs, max_new_tokens=ANSWER, min_new_tokens=ANSWER, prefix_cache=store, **GREEDY
                )
            _assert_close(output.logits[0], _reference(upstream, inputs))
            expected = upstream.generate(**inputs, max_new_tokens=ANSWER, min_new_tokens=ANSWER, **GREEDY)
            assert torch.equal(output.sequences, expected.sequences)
            length = inputs["input_ids"].shape[1]
            fed += prefill.prefilled(new_tokens=ANSWER)
            # Text before the first image attends to every image: a turn adding one is recomputed from the start
            recomputed = leading_text and bool(images)
            minimum += length if recomputed else length - min(cached, length - 1)
            cached = length + ANSWER - 1  # the store holds the prompt and the answer but its last token
            history = [*history, output.sequences[0, length:].tolist()]
    assert runs.images == 2
    assert fed <= 1.02 * minimum, (fed, minimum)


def test_a_static_cache_holds_every_image_with_and_without_the_prefix_cache():
    # Upstream sizes the static cache's cross-attention layers from `pixel_values`, which input preparation takes out
    upstream, ours = model_pair("mllama")
    store = PrefixCache()
    first = [IMAGE, BOS + [7, 8]]
    for segments, seeds in ((first, [3]), ([*first, [9], IMAGE, [10, 11]], [3, 4])):
        inputs = _inputs(ours.config, segments, seeds)
        expected = upstream.generate(**inputs, max_new_tokens=3, cache_implementation="static", **GREEDY)
        for options in ({}, {"prefix_cache": store}):
            actual = ours.generate(**inputs, max_new_tokens=3, cache_implementation="static", **options, **GREEDY)
            assert torch.equal(actual.sequences, expected.sequences)
            for step, expected_step in zip(actual.logits, expected.logits, strict=True):
                _assert_close(step, expected_step)


def test_assisted_decoding_is_refused_with_the_reason():
    # Rejected drafts are cut out by cropping every cache layer to a token count (transformers fails with a shape error)
    _, ours = model_pair("mllama")
    inputs = _inputs(ours.config, [BOS, IMAGE, [7, 8, 7, 8]], [3])
    with pytest.raises(ValueError, match="cross-attention layers hold the images' states"):
        ours.generate(**inputs, max_new_tokens=4, prompt_lookup_num_tokens=2)


def test_a_cache_cropped_to_a_token_count_is_refused():
    # `DynamicCache.crop` cuts the cross-attention layers' image positions too: their count no longer fits the images
    upstream, ours = model_pair("mllama")
    inputs = _inputs(ours.config, [IMAGE, BOS + [7, 8, 9, 10, 11, 12, 13], IMAGE, [15, 16]], [3, 4])
    cache = DynamicCache(config=upstream.config)
    upstream.generate(**inputs, cache=cache, max_new_tokens=1, do_sample=False)
    cache.crop(8 - cache.get_seq_length())  # to 8 tokens: after the first image, before the second
    with pytest.raises(ValueError, match="cropped to a token count"):
        ours.generate(**inputs, cache=cache, max_new_tokens=1)


def _mask_seeing_every_earlier_image(inputs: dict) -> dict:
    """The processor's `cross_attention_mask` changed by hand: after the second image, tokens see the first too."""
    mask = inputs["cross_attention_mask"].clone()  # (batch, seq, images, tiles)
    second = int(mask[0, :, 1].any(dim=-1).nonzero()[0, 0])
    mask[0, second:, 0] = mask[0, second - 1, 0]
    return {**inputs, "cross_attention_mask": mask}


def test_prefix_cache_keeps_apart_prompts_whose_masks_differ():
    """Stored KV is keyed by each token's row of `cross_attention_mask` too: after the cross-attention layer a
    token's KV depends on the images it sees. A hand-made mask shares the processor's stored prefix only up to where
    they differ, and every call is exact."""
    upstream, ours = model_pair("mllama")
    inputs = _inputs(ours.config, [IMAGE, BOS + [5, 6, 7], IMAGE, [8, 9, 10, 11, 12, 13, 14, 15, 16]], [1, 2])
    hand_made = _mask_seeing_every_earlier_image(inputs)
    store = PrefixCache(block_size=4)
    for call in (inputs, hand_made, inputs):
        output = ours.generate(**call, max_new_tokens=1, prefix_cache=store, **GREEDY)
        _assert_close(output.logits[0], _reference(upstream, call))
    assert store.stats.hits == 2


def test_a_row_seeing_a_later_image_is_neither_looked_up_nor_stored():
    """A mask no processor writes, where text sees an image placed after it: that text's KV depends on an image its
    key does not hold yet, so the row bypasses the prefix cache (and is exact, as without one)."""
    upstream, ours = model_pair("mllama")
    inputs = _inputs(ours.config, [IMAGE, BOS + [5, 6, 7], IMAGE, [8, 9, 10]], [1, 2])
    mask = inputs["cross_attention_mask"].clone()
    mask[0, 1:4, 1] = mask[0, -1, 1]  # the text before the second image sees it
    early = {**inputs, "cross_attention_mask": mask}
    store = PrefixCache(block_size=4)
    for _ in range(2):
        output = ours.generate(**early, max_new_tokens=1, prefix_cache=store, **GREEDY)
        _assert_close(output.logits[0], _reference(upstream, early))
    assert (store.stats.hits, store.stats.entries) == (0, 0)
