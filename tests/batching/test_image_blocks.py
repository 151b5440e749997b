"""Gemma3's bidirectional image blocks in the engine: no slice ends inside one, and each attends to itself both ways.

Gemma3's tiny image is 16 placeholders (one block) and its sliding window 6, so sliding layers see a block only
within the window, as upstream's mask does. Budgets of 16 and 20 tokens put cuts inside blocks, which the scheduler
moves back to the block start (or empties the slice).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import transformers
from cb_models import (
    assert_matches_reference,
    cb_pair,
    engine_config,
    greedy,
    one_by_one,
    pixels,
    reference_tokens,
    run_engine,
    within,
)
from test_families import MAX_NEW_TOKENS, family_requests
from transformers.generation.continuous_batching.requests import RequestStatus

import vlmprep
from support.registry import FAMILY_CASES
from vlmprep.batching import check_batching_support
from vlmprep.batching.blocks import BlockAwareScheduling, block_admission_error
from vlmprep.testing import IMAGE, tiny_gemma3_config, tiny_model


class SlicesSeen:
    """Records every scheduled slice of a request with blocks (start, end, blocks) and how many were emptied."""

    def __init__(self, monkeypatch):
        self.slices, self.emptied = [], 0
        original = BlockAwareScheduling._process_candidates

        def spy(scheduler, *args, **kwargs):
            scheduled, *rest = original(scheduler, *args, **kwargs)
            for future in scheduled:
                items = getattr(future.state, "items", None)
                if items is not None and items.blocks:
                    start = future.state.position_offset  # not yet moved past the slice at scheduling time
                    self.slices.append((start, start + future.query_length, items.blocks))
            return scheduled, *rest

        original_schedule = BlockAwareScheduling._schedule_request

        def count_emptied(scheduler, state, request_tokens, token_budget, waiting):
            original_schedule(scheduler, state, request_tokens, token_budget, waiting)
            self.emptied += bool(request_tokens) and not state.tokens_to_process

        monkeypatch.setattr(BlockAwareScheduling, "_process_candidates", spy)
        monkeypatch.setattr(BlockAwareScheduling, "_schedule_request", count_emptied)

    def cuts_inside_blocks(self) -> list:
        return [(s, e) for s, e, blocks in self.slices for lo, hi in blocks if lo < e < hi]


@pytest.mark.parametrize("max_batch_tokens", [16, 20, 64], ids=["budget16", "budget20", "budget64"])
def test_gemma3_image_requests_equal_generate(max_batch_tokens, monkeypatch):
    # 0, 1 and 2 images per request, an image shared by two requests; the 21- to 40-token prompts are split at 16 and
    # 20 tokens, and a budget of 16 holds an image block and nothing else, so slices are emptied until one fits
    upstream, ours = cb_pair("gemma3")
    requests = family_requests(upstream, "gemma3")
    seen = SlicesSeen(monkeypatch)
    outputs = run_engine(ours, requests, MAX_NEW_TOKENS, max_batch_tokens)
    for request, output in zip(requests, outputs.values(), strict=True):
        assert_matches_reference(upstream, request, output, MAX_NEW_TOKENS)
    assert seen.slices and not seen.cuts_inside_blocks()
    if max_batch_tokens == 16:
        assert seen.emptied


def full_attention_gemma3() -> tuple:
    """(plain Gemma3, drop-in) whose layers are all full attention: the engine shares prefixes only without sliding
    layers, and passes the mask of a single layer type alone (not in a dict)."""
    config = FAMILY_CASES["gemma3"].make_config()
    config.text_config.layer_types = ["full_attention"] * config.text_config.num_hidden_layers
    upstream = tiny_model(transformers.Gemma3ForConditionalGeneration, config, seed=0).eval()
    ours = vlmprep.Gemma3ForConditionalGeneration(upstream.config).eval()
    ours.load_state_dict(upstream.state_dict())
    return upstream, ours


def test_gemma3_shared_prefix_ending_inside_an_image():
    # Pages of 4: the second request shares the 16 tokens before its last, incomplete page, which end inside the image
    # block (positions 2-17). Its slice starts inside the block, whose first part's KV was computed whole by the first
    # request; the rest of the block attends to itself both ways.
    upstream, ours = full_attention_gemma3()
    request = FAMILY_CASES["gemma3"].build_inputs(upstream.config, [[15], IMAGE, [17]], [1])
    length, shared = request["input_ids"].shape[-1], 16
    assert (length, _blocks(request)) == (20, [(2, 18)])
    with one_by_one(ours, max_new_tokens=3) as run:
        assert [run(upstream, request), run(upstream, request)] == [length, length - shared]


def test_gemma3_images_in_one_block_are_shared_only_together():
    # Two images with no text between them are one block (upstream's runs of `token_type_ids == 1`): a page of the
    # first image holds KV that saw the second, so a prompt whose second image differs shares none of the block.
    upstream, ours = full_attention_gemma3()
    placeholder = ours.config.image_token_id
    ids = [15, 120, *[placeholder] * 32, 121, 17]  # BOI, two images of 16 placeholders, EOI
    token_types = torch.tensor([[0, 0, *[1] * 32, 0, 0]])

    def request(first: int, second: int) -> dict:
        return {"input_ids": torch.tensor([ids]), "token_type_ids": token_types, "pixel_values": pixels(first, second)}

    with one_by_one(ours, max_new_tokens=3) as run:
        # The same block again shares its 32 tokens before the last page; another second image shares nothing
        assert [run(upstream, request(*seeds)) for seeds in ((1, 2), (1, 3), (1, 2))] == [36, 36, 4]


def test_gemma3_block_longer_than_a_step_fails_alone():
    upstream, ours = cb_pair("gemma3")
    requests = family_requests(upstream, "gemma3")
    outputs = ours.generate_batch(
        requests, generation_config=greedy(2), continuous_batching_config=engine_config(), progress_bar=False
    )
    for request, output in zip(requests, outputs.values(), strict=True):
        if isinstance(request, list):
            assert_matches_reference(upstream, request, output, 2)
        else:
            assert output.status == RequestStatus.FAILED
            assert "16 placeholder tokens" in output.error and "at most 12 tokens" in output.error


def samples_of_a_prompt_ending_in_an_image(ours, max_batch_tokens: int) -> tuple[dict, dict]:
    # Two samples each (top-1 sampling: each is the greedy answer); the prompt's last 16 tokens are one image block
    ids = [15, 120, *[ours.config.image_token_id] * 16]
    request = {"input_ids": torch.tensor([ids]), "token_type_ids": torch.tensor([[0, 0, *[1] * 16]])}
    request["pixel_values"] = pixels(1)
    config = transformers.GenerationConfig(
        max_new_tokens=3, do_sample=True, top_k=1, eos_token_id=-1, num_return_sequences=2
    )
    outputs = within(
        60,
        lambda: ours.generate_batch(
            [request, [4, 5, 6]],
            generation_config=config,
            continuous_batching_config=engine_config(max_batch_tokens=max_batch_tokens),
            progress_bar=False,
        ),
    )
    return request, outputs


def test_gemma3_parallel_samples_of_a_prompt_ending_in_an_image():
    # Upstream forks the samples after all but the last prompt token, which here lies inside the image block: the
    # samples are prefilled whole instead (this hung: every cut moved back to the block start, an empty slice forever)
    upstream, ours = cb_pair("gemma3")
    request, outputs = samples_of_a_prompt_ending_in_an_image(ours, 64)
    assert list(outputs) == ["req_0__child#0", "req_0", "req_1__child#0", "req_1"]
    # Top-1 sampling reports log-probabilities of the filtered distribution (0): the tokens are compared
    expected = [reference_tokens(upstream, request, 3)] * 2 + [reference_tokens(upstream, [4, 5, 6], 3)] * 2
    assert [output.generated_tokens for output in outputs.values()] == expected


def test_gemma3_failed_request_fails_its_parallel_samples_too():
    # A step of 12 tokens cannot hold the 16-token block: the request fails at admission, and so does its sample
    # (`generate_batch` waits for an output of each; it hung waiting for the sample)
    upstream, ours = cb_pair("gemma3")
    _, outputs = samples_of_a_prompt_ending_in_an_image(ours, 12)
    for request_id in ("req_0__child#0", "req_0"):
        assert outputs[request_id].status == RequestStatus.FAILED
        assert "at most 12 tokens" in outputs[request_id].error
    assert outputs["req_1"].error is None and outputs["req_1__child#0"].error is None


@pytest.mark.parametrize("token_types", ["no block", "block over the image and its markers"])
def test_gemma3_paged_generate_uses_the_callers_token_types(token_types):
    # `generate` uses the caller's token types, and so must its paged form (they were dropped and re-derived): the
    # blocks they draw change the answer (image seed 3 answers otherwise with the processor's token types)
    upstream, ours = cb_pair("gemma3")
    request = FAMILY_CASES["gemma3"].build_inputs(upstream.config, [[15], IMAGE, [17, 18]], [3])
    assert _blocks(request) == [(2, 18)]
    derived = reference_tokens(upstream, request, 6)
    types = torch.zeros_like(request["token_type_ids"])
    if token_types != "no block":
        types[0, 1:19] = 1  # the start-of-image marker, the 16 placeholders, the end-of-image marker
    request = {**request, "token_type_ids": types}
    expected = reference_tokens(upstream, request, 6)
    assert expected != derived
    sequences = ours.generate(
        **request,
        cache_implementation="paged",
        max_new_tokens=6,
        do_sample=False,
        continuous_batching_config=engine_config(max_batch_tokens=64),
    )
    assert sequences[0, 0, -6:].tolist() == expected


def test_gemma3_engine_keeps_attention_with_a_mask():
    # On a GPU the engine would switch sdpa to flash, which takes no mask: for Gemma3 it keeps sdpa (caller's config
    # untouched)
    upstream, ours = cb_pair("gemma3")
    config = engine_config()
    manager = ours.init_continuous_batching(generation_config=greedy(2), continuous_batching_config=config)
    assert config.auto_switch_to_flash and not manager.continuous_batching_config.auto_switch_to_flash


def test_attention_without_a_mask_is_refused():
    # Flash kernels take no mask, so a block could not be opened: a model loaded with one is refused for images up
    # front; one the engine switches to flash itself (`auto_switch_to_flash`, on a GPU) fails its image requests at
    # admission. Text requests run.
    model = vlmprep.Gemma3ForConditionalGeneration(tiny_gemma3_config())
    model.config._attn_implementation = "flash_attention_2"  # set, not loaded: no flash kernel is needed on CPU
    with pytest.raises(ValueError, match="takes none"):
        check_batching_support(model, with_items=True)
    check_batching_support(model, with_items=False)
    images = SimpleNamespace(blocks=((3, 19),))
    error = block_admission_error(model, images, max_batch_tokens=64)
    assert "takes none" in str(error) and "auto_switch_to_flash=False" in str(error)
    model.config._attn_implementation = "sdpa"
    assert block_admission_error(model, images, max_batch_tokens=64) is None
    assert "at most 8 tokens" in str(block_admission_error(model, images, max_batch_tokens=8))


def _blocks(request) -> list[tuple[int, int]]:
    types = request["token_type_ids"][0].tolist() + [0]
    starts = [i for i, t in enumerate(types[:-1]) if t == 1 and (i == 0 or types[i - 1] == 0)]
    return [(start, next(i for i in range(start, len(types)) if types[i] == 0)) for start in starts]
