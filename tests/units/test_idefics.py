"""IDEFICS (Flamingo-style cross-attention): what the conformance scenarios do not check.

The vision tower and the perceiver resampler run once per distinct image, in input preparation, and never at a
decoding step (upstream resamples at every step); a 5-turn chat through a `PrefixCache` is exact at every turn, encodes
each image once and feeds about the fewest tokens any cache can; bad inputs raise clear errors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

import pytest
import torch
import transformers

from conftest import model_pair
from support.chat import run_chat
from support.generation_checks import TEXT_ANSWERS
from support.references import SYSTEM, Prompt, assert_same_steps, generate_logits
from vlmprep import PrefixCache
from vlmprep.models.idefics import IdeficsForVisionText2Text
from vlmprep.testing import IMAGE, tiny_model
from vlmprep.testing.configs import tiny_idefics_config

FAMILY = "idefics"
TWO_IMAGES = [SYSTEM, IMAGE, [30, 31], IMAGE, [32, 33]]


class ModuleCalls:
    """Counts the forwards of some modules of a model (forward hooks), for the duration of a `with` block."""

    def __init__(self, *modules: torch.nn.Module):
        self.modules = modules
        self.calls = [0] * len(modules)

    def __enter__(self):
        self.handles = [
            module.register_forward_hook(lambda *_, index=index: self._count(index))
            for index, module in enumerate(self.modules)
        ]
        return self

    def _count(self, index: int) -> None:
        self.calls[index] += 1

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()


def test_tower_and_resampler_run_once_per_call_and_never_while_decoding():
    upstream, ours = model_pair(FAMILY)
    ours.encoder_cache.clear()
    inputs = Prompt(ours.config, TWO_IMAGES, image_seeds=[11, 12]).inputs()
    vision = (ours.model.vision_model, ours.model.perceiver_resampler)
    with ModuleCalls(*vision) as runs:
        _, logits = generate_logits(ours, inputs, max_new_tokens=4)
    assert runs.calls == [1, 1]  # both images in one batched call, before prefill
    _, expected = generate_logits(upstream, inputs, max_new_tokens=4)
    assert_same_steps(logits, expected)
    # Upstream resamples the tower's states at every step
    with ModuleCalls(upstream.model.vision_model, upstream.model.perceiver_resampler) as upstream_runs:
        generate_logits(upstream, inputs, max_new_tokens=4)
    assert upstream_runs.calls == [1, 4]
    # The same images again: the encoder cache serves them
    with ModuleCalls(*vision) as runs:
        _, logits = generate_logits(ours, inputs, max_new_tokens=4)
    assert runs.calls == [0, 0]
    assert_same_steps(logits, expected)


@contextlib.contextmanager
def image_state_projections(model) -> Iterator[list[int]]:
    """How many times the gated layers' key and value projections computed (not reused) a projection, per layer."""
    projections = [
        module
        for layer in model.model.gated_cross_attn_layers
        for module in (layer.cross_attn.k_proj, layer.cross_attn.v_proj)
    ]
    computed = [0] * len(projections)
    linear = torch.nn.functional.linear

    def counting(input, weight, bias=None):
        for index, module in enumerate(projections):
            computed[index] += weight is module.weight
        return linear(input, weight, bias)

    with mock.patch.object(torch.nn.functional, "linear", counting):
        yield computed


def test_gated_layers_project_the_image_states_once_per_call():
    """Upstream projects the image states to keys and values in every gated layer at every forward; the drop-in once
    per call (the same values: the answer is upstream's), and again in the next call."""
    upstream, ours = model_pair(FAMILY)
    inputs = Prompt(ours.config, TWO_IMAGES, image_seeds=[11, 12]).inputs()
    _, expected = generate_logits(upstream, inputs, max_new_tokens=4)
    for _ in range(2):
        with image_state_projections(ours) as computed:
            _, logits = generate_logits(ours, inputs, max_new_tokens=4, prefill_chunk_size=5)
        assert computed == [1] * len(computed)
        assert_same_steps(logits, expected)
    with image_state_projections(upstream) as computed:
        generate_logits(upstream, inputs, max_new_tokens=4)
    assert computed == [4] * len(computed)  # one per forward: the prefill and three decoding steps


def test_five_turn_two_image_chat_is_exact_encodes_each_image_once_and_feeds_the_fewest_tokens():
    upstream, ours = model_pair(FAMILY)
    ours.encoder_cache.clear()
    turns = [[SYSTEM, IMAGE, [30, 31]], [[32, 33]], [[34], IMAGE, [35]], [[36, 37]], [[38, 39]]]
    seeds = [[100], [], [101], [], []]
    with ModuleCalls(ours.model.vision_model, ours.model.perceiver_resampler) as runs:
        # Every turn's first logits equal one uncached forward of the whole prompt (`run_chat` checks them)
        chat = run_chat(upstream, ours, turns, seeds, PrefixCache(max_bytes=2**24), 3, **TEXT_ANSWERS)
    assert chat.encoded == [1, 1]  # each image once, in the turn that adds it
    assert runs.calls == [2, 2]
    assert chat.fed <= 1.02 * chat.minimum, (chat.fed, chat.minimum)


def test_text_turn_before_the_first_image_is_resumed_from_the_prefix_cache():
    # transformers' forward refuses a call without images, so this drop-in's own first turn (with an image) stores
    # the prefix and the next turn, which only adds text and a second image, resumes from it
    upstream, ours = model_pair(FAMILY)
    store = PrefixCache(max_bytes=2**24)
    first = Prompt(ours.config, [SYSTEM, IMAGE, [30]], image_seeds=[5])
    generate_logits(ours, first.inputs(), max_new_tokens=1, prefix_cache=store, **TEXT_ANSWERS)
    second = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31, 32], IMAGE, [33]], image_seeds=[5, 6])
    _, logits = generate_logits(ours, second.inputs(), max_new_tokens=2, prefix_cache=store)
    _, expected = generate_logits(upstream, second.inputs(), max_new_tokens=2)
    assert store.stats.hits >= 1
    assert_same_steps(logits, expected)


def test_text_only_call_with_the_processors_blank_image_is_exact():
    # The processor gives a text-only prompt one all-zero image that no token sees: no item, zero states for it
    upstream, ours = model_pair(FAMILY)
    ids = torch.tensor([[3, 10, 11, 12, 13], [0, 0, 3, 14, 15]])
    inputs = {
        "input_ids": ids,
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]]),
        "pixel_values": torch.zeros(2, 1, 3, 16, 16),
        "image_attention_mask": torch.zeros(2, 5, 1, dtype=torch.bool),
    }
    with ModuleCalls(ours.model.vision_model) as runs:
        _, logits = generate_logits(ours, inputs, max_new_tokens=3, prefill_chunk_size=2)
    assert runs.calls == [0]
    _, expected = generate_logits(upstream, inputs, max_new_tokens=3)
    assert_same_steps(logits, expected)


def _bad_inputs(inputs: dict) -> list[tuple[dict, str]]:
    mask, pixels = inputs["image_attention_mask"], inputs["pixel_values"]
    sees_before = mask.clone()
    sees_before[:, 0, 0] = 1  # the first token sees the first image, whose `<image>` token comes later
    return [
        ({**inputs, "image_attention_mask": None}, "is needed with IDEFICS images"),
        ({**inputs, "image_attention_mask": mask[..., 0]}, r"must be `\(batch_size, seq_len, num_images\)`"),
        ({**inputs, "image_attention_mask": mask[..., :1]}, "one column per image slot"),
        ({**inputs, "image_attention_mask": sees_before}, "comes later"),
        ({**inputs, "pixel_values": pixels[:, :1]}, r"1 image\(s\) were passed but the prompt has 2"),
        ({**inputs, "pixel_values": pixels[..., :8, :8]}, "16"),
    ]


@pytest.mark.parametrize("index", range(6))
def test_bad_inputs_raise_clear_errors_then_the_model_is_still_exact(index):
    upstream, ours = model_pair(FAMILY)
    inputs = Prompt(ours.config, TWO_IMAGES, image_seeds=[3, 4]).inputs()
    bad, message = _bad_inputs(inputs)[index]
    with pytest.raises(ValueError, match=message):
        ours.generate(**{key: value for key, value in bad.items() if value is not None}, max_new_tokens=1)
    _, logits = generate_logits(ours, inputs, max_new_tokens=2)
    _, expected = generate_logits(upstream, inputs, max_new_tokens=2)
    assert_same_steps(logits, expected)


def test_prefix_cache_keeps_apart_prompts_whose_masks_differ():
    """Stored KV is keyed by each token's row of `image_attention_mask` too: a hand-made mask (a token seeing every
    earlier image, not only the latest) and the processor's share the stored prefix only up to where they differ, and
    each call is exact."""
    upstream, ours = model_pair(FAMILY)
    inputs = Prompt(ours.config, TWO_IMAGES, image_seeds=[3, 4]).inputs()
    # (batch, seq, images): slot j seen where the latest image seen is j or a later one
    every_earlier = inputs["image_attention_mask"].flip(-1).cummax(dim=-1).values.flip(-1)
    hand_made = {**inputs, "image_attention_mask": every_earlier}
    store = PrefixCache(block_size=4)
    for call in (inputs, hand_made, inputs):
        _, logits = generate_logits(ours, call, max_new_tokens=2, prefix_cache=store)
        _, expected = generate_logits(upstream, call, max_new_tokens=2)
        assert_same_steps(logits, expected)
    assert store.stats.hits == 2  # the hand-made mask's call reused the prompt up to the second image, the last all


def test_without_a_resampler_the_towers_states_are_handed_over_exactly(tmp_path):
    config = tiny_idefics_config()
    config.use_resampler = False  # upstream then reads `image_encoder_embeddings`, the tower's patches
    tiny_model(transformers.IdeficsForVisionText2Text, config).save_pretrained(tmp_path)
    upstream = transformers.IdeficsForVisionText2Text.from_pretrained(tmp_path).eval()
    ours = IdeficsForVisionText2Text.from_pretrained(tmp_path).eval()
    inputs = Prompt(ours.config, TWO_IMAGES, image_seeds=[3, 4]).inputs()
    _, logits = generate_logits(ours, inputs, max_new_tokens=3, prefill_chunk_size=4)
    _, expected = generate_logits(upstream, inputs, max_new_tokens=3)
    assert_same_steps(logits, expected)


def test_config_without_image_token_id_is_refused_with_the_fix():
    config = tiny_idefics_config()
    del config.image_token_id
    with pytest.raises(ValueError, match="config.image_token_id = processor.tokenizer"):
        IdeficsForVisionText2Text(config)


def test_continuous_batching_is_refused_naming_why():
    _, ours = model_pair(FAMILY)
    with pytest.raises(ValueError, match="cross-attention"):
        ours.init_continuous_batching()


def test_drop_in_assistant_with_prefill_chunks_is_exact():
    """A drop-in drafting for itself in chunks: its later drafting rounds feed a few tokens in one forward, with the
    prepared images (upstream's chunks would hand IDEFICS's forward none, which it reads at every forward)."""
    upstream, ours = model_pair(FAMILY)
    inputs = Prompt(ours.config, TWO_IMAGES, image_seeds=[11, 12]).inputs()
    sequences, logits = generate_logits(ours, inputs, 4, assistant_model=ours, prefill_chunk_size=3, **TEXT_ANSWERS)
    expected_sequences, expected = generate_logits(upstream, inputs, 4, **TEXT_ANSWERS)
    assert torch.equal(sequences, expected_sequences)
    assert_same_steps(logits, expected)


def test_forward_takes_a_cache_under_its_deprecated_name_as_upstream():
    # transformers' own `test_bc_cache_name_forward`: `past_key_values=` reaches upstream's forward alone, renamed with
    # its warning (the drop-in passed `cache=None` next to it, and upstream then ignored the caller's cache).
    upstream, ours = model_pair(FAMILY)
    prompt = Prompt(ours.config, TWO_IMAGES, image_seeds=[3, 4])
    whole, head = prompt.inputs(), prompt.inputs(prompt.length - 1)
    last = {"input_ids": whole["input_ids"][:, -1:], "image_attention_mask": whole["image_attention_mask"][:, -1:]}
    outputs = {}
    for name, model in (("upstream", upstream), ("ours", ours)):
        with torch.no_grad():
            cache = model(**head, use_cache=True).cache
            with pytest.warns(FutureWarning, match="`past_key_values` is deprecated"):
                outputs[name] = model(
                    **last, pixel_values=whole["pixel_values"], past_key_values=cache, use_cache=True
                )
    assert outputs["ours"].cache.get_seq_length() == prompt.length == outputs["upstream"].cache.get_seq_length()
    torch.testing.assert_close(outputs["ours"].logits, outputs["upstream"].logits, rtol=0, atol=1e-5)


def test_interpolated_position_embeddings_match_upstream():
    # transformers' own `test_generate_with_image_pos_embeddings_interpolation_*`: images of another size than the
    # tower's, with `interpolate_pos_encoding=True`, which upstream takes (the drop-in refused their size).
    upstream, ours = model_pair(FAMILY)
    inputs = Prompt(ours.config, TWO_IMAGES, image_seeds=[5, 6]).inputs()
    size = ours.config.vision_config.image_size + ours.config.vision_config.patch_size  # one patch more a side
    generator = torch.Generator().manual_seed(0)
    pixels = torch.rand(*inputs["pixel_values"].shape[:3], size, size, generator=generator)
    inputs = {**inputs, "pixel_values": pixels}
    expected_ids, expected = generate_logits(upstream, inputs, max_new_tokens=3, interpolate_pos_encoding=True)
    ids, logits = generate_logits(ours, inputs, max_new_tokens=3, interpolate_pos_encoding=True)
    assert torch.equal(ids, expected_ids)
    assert_same_steps(logits, expected)
    with pytest.raises(ValueError, match="vision tower takes"):  # without the flag the size is still refused
        ours.generate(**inputs, max_new_tokens=1)


def test_generate_from_inputs_embeds_matches_upstream():
    # transformers' own `test_generate_continue_from_inputs_embeds`: `generate` takes `inputs_embeds` only from a class
    # whose `prepare_inputs_for_generation` names them (the drop-in's took `*args`), and the images must still reach
    # upstream's forward (the drop-in dropped `pixel_values` from every step's inputs).
    upstream, ours = model_pair(FAMILY)
    inputs = Prompt(ours.config, TWO_IMAGES, image_seeds=[7, 8]).inputs()
    embeds = upstream.get_input_embeddings()(inputs.pop("input_ids"))
    expected_ids, expected = generate_logits(upstream, {**inputs, "inputs_embeds": embeds}, max_new_tokens=3)
    ids, logits = generate_logits(ours, {**inputs, "inputs_embeds": embeds}, max_new_tokens=3)
    assert torch.equal(ids, expected_ids)
    assert_same_steps(logits, expected)
    other = {**inputs, "pixel_values": inputs["pixel_values"].flip(1), "inputs_embeds": embeds}
    _, other_logits = generate_logits(ours, other, max_new_tokens=1)
    assert (other_logits[0] - logits[0]).abs().max() > 1e-3, "the images must reach the logits"
