"""Items made of several placeholder runs (`layouts/multi_run.py`): an image's views (its global view, then each
slice) as the MiniCPM families write them, each view its own run and item; and an image of crops and a global view
from two pixel inputs (Step-3.7), one item in several runs.

Every logit is compared with the plain transformers class without a cache; encoder work is counted with hooks
(`encoder_runs`, items per encoder call: views here) and prefill work with `PrefillCounter`.
"""

from __future__ import annotations

import copy

import pytest
import torch
import transformers

import vlmprep
from conftest import model_pair
from support.caller_caches import cropped_cache
from support.references import (
    Prompt,
    assert_close,
    assert_same_steps,
    encoder_runs,
    generate_logits,
    no_placeholder_answers,
    uncached_logits,
    with_encoder_cache,
)
from support.traits import families_with, has_layout, not_, pins_its_prompt, takes
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE, VIDEO, PrefillCounter, VisionRunCounter, tiny_model
from vlmprep.testing.configs import tiny_text_config, tiny_vision_config

PACKED_VIEW_FAMILIES = families_with(has_layout("packed_views", "packed_views_mrope"))
# Seeds 2 and 9 draw images with a global view and two slices of different sizes (three runs each)
SLICED = [[2, 10], IMAGE, [11, 12], IMAGE, [13]]
SLICED_SEEDS = [2, 9]


def _placeholder_positions(prompt: Prompt, token_id: int) -> list[int]:
    return (prompt.input_ids[0] == token_id).nonzero().flatten().tolist()


@pytest.mark.parametrize("family", PACKED_VIEW_FAMILIES)
def test_an_image_of_several_runs_is_encoded_once_whatever_the_chunks(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, SLICED, image_seeds=SLICED_SEEDS)
    views = ours.count_items(prompt.inputs())
    assert views == 6 and len(_placeholder_positions(prompt, ours.config.image_token_id)) > views
    expected_sequences, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    with with_encoder_cache(ours):
        for chunk_size in (1, 2, 5, 7, None):  # boundaries inside the global view's run and inside the slices'
            with VisionRunCounter(ours) as runs:
                sequences, logits = generate_logits(
                    ours, prompt.inputs(), max_new_tokens=2, prefill_chunk_size=chunk_size
                )
            assert torch.equal(sequences, expected_sequences), f"chunk size {chunk_size}"
            assert_same_steps(logits, expected_logits)
            # The first call encodes every view of both images in one encoder call; later calls hit the cache
            assert runs.batch_sizes == ([views] if chunk_size == 1 else []), (chunk_size, runs.batch_sizes)


@pytest.mark.parametrize("family", PACKED_VIEW_FAMILIES)
def test_a_prefix_cache_resumes_between_the_runs_of_an_image(family):
    upstream, ours = model_pair(family)
    stored = Prompt(ours.config, SLICED, image_seeds=SLICED_SEEDS)
    asked_inputs = dict(stored.inputs())
    # The second image again, but with other slices: its global view is the stored one, its slices are new
    sizes = asked_inputs["target_sizes"]
    slice_columns = int(sizes[-2:].prod(-1).sum()) * ours.config.vision_config.patch_size
    pixels = asked_inputs["pixel_values"].clone()
    pixels[..., -slice_columns:] = torch.randn(
        pixels[..., -slice_columns:].shape, generator=torch.Generator().manual_seed(5)
    )
    asked_inputs["pixel_values"] = pixels
    global_view_end = _placeholder_positions(stored, ours.config.image_token_id)[-5] + 1  # its last placeholder + 1

    store = PrefixCache(max_bytes=2**26)
    generate_logits(ours, stored.inputs(), max_new_tokens=1, prefix_cache=store)
    with encoder_runs(ours) as runs, PrefillCounter(ours) as prefill:
        _, logits = generate_logits(ours, asked_inputs, max_new_tokens=1, prefix_cache=store)
    expected = uncached_logits(upstream, asked_inputs)
    assert (expected - uncached_logits(upstream, stored.inputs())).abs().max() > 1e-3, "the slices reach the logits"
    assert_close(logits[0], expected)
    # Resumed at the end of the shared global view's run (a recurrent-state snapshot point), inside the image
    assert sum(prefill.lengths) == stored.length - global_view_end, (global_view_end, prefill.lengths)
    assert runs.batch_sizes == [2], "only the two new slices are encoded"


@pytest.mark.parametrize("family", families_with(has_layout("packed_views", "packed_views_mrope"), takes("video")))
def test_video_frames_and_image_views_in_chunks(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [[2, 10], VIDEO, [11, 12], IMAGE, [13]], image_seeds=[1, 2])
    frames, views = ours.count_items(prompt.inputs(), modality="video"), ours.count_items(prompt.inputs())
    assert (frames, views) == (2, 3)
    expected_sequences, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    for chunk_size in (1, 3, 4, None):
        with encoder_runs(ours) as runs:
            sequences, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=2, prefill_chunk_size=chunk_size)
        assert torch.equal(sequences, expected_sequences), f"chunk size {chunk_size}"
        assert_same_steps(logits, expected_logits)
        assert sorted(runs.batch_sizes) == [frames, views], f"chunk size {chunk_size}: {runs.batch_sizes}"


@pytest.mark.parametrize("family", PACKED_VIEW_FAMILIES)
def test_the_calls_downsample_mode_sets_the_view_counts(family):
    # transformers' tester passes `downsample_mode` per call: "4x" skips the window merger, 4x more placeholders
    upstream, ours = model_pair(family)
    four_x = copy.deepcopy(ours.config)
    four_x.downsample_mode = "4x"  # the processor's mode: its prompts count a view's patches over 4
    prompt = Prompt(four_x, SLICED, image_seeds=SLICED_SEEDS)
    counts = ours.item_token_counts({**prompt.inputs(), "downsample_mode": "4x"})
    assert sum(counts) == len(_placeholder_positions(prompt, ours.config.image_token_id)) == 12, counts
    expected_sequences, expected_logits = generate_logits(upstream, prompt.inputs(), downsample_mode="4x")
    for chunk_size in (None, 3):
        sequences, logits = generate_logits(ours, prompt.inputs(), downsample_mode="4x", prefill_chunk_size=chunk_size)
        assert torch.equal(sequences, expected_sequences)
        assert_same_steps(logits, expected_logits)
    if ours.config.downsample_mode != "4x":
        with pytest.raises(ValueError, match="not a multiple of 4 a side"):
            ours.generate(**prompt.inputs(), max_new_tokens=1)  # the config's "16x": these views are 4x views


@pytest.mark.parametrize("family", PACKED_VIEW_FAMILIES)
def test_packed_views_refused_clearly(family):
    _, ours = model_pair(family)
    inputs = Prompt(ours.config, SLICED, image_seeds=SLICED_SEEDS).inputs()
    without_sizes = {key: value for key, value in inputs.items() if key != "target_sizes"}
    with pytest.raises(ValueError, match="without `target_sizes`"):
        ours.generate(**without_sizes, max_new_tokens=1)
    odd = {**inputs, "target_sizes": inputs["target_sizes"] + torch.tensor([0, 1], dtype=torch.int32)}
    with pytest.raises(ValueError, match="not a multiple of"):
        ours.check_pixel_inputs(odd)
    short = {**inputs, "pixel_values": inputs["pixel_values"][..., :-1]}
    with pytest.raises(ValueError, match="packed side by side"):
        ours.generate(**short, max_new_tokens=1)


# -- A global view and local crops from two pixel inputs, joined per image ----------------------------------------------

GLOBAL_AND_LOCAL_FAMILIES = families_with(has_layout("global_and_local_views"))


@pytest.mark.parametrize("family", GLOBAL_AND_LOCAL_FAMILIES)
def test_an_image_of_crops_and_a_global_view_is_encoded_once_whatever_the_chunks(family):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, SLICED, image_seeds=SLICED_SEEDS)
    assert torch.as_tensor(prompt.full_inputs["num_local_patches"]).tolist() == [2, 2]
    expected_sequences, expected_logits = generate_logits(upstream, prompt.inputs(), max_new_tokens=2)
    with with_encoder_cache(ours):
        for chunk_size in (1, 2, 3, 5, None):  # boundaries inside and between the runs of each image
            with VisionRunCounter(ours) as runs:
                sequences, logits = generate_logits(
                    ours, prompt.inputs(), max_new_tokens=2, prefill_chunk_size=chunk_size
                )
            assert torch.equal(sequences, expected_sequences), f"chunk size {chunk_size}"
            assert_same_steps(logits, expected_logits)
            assert runs.batch_sizes == ([2] if chunk_size == 1 else []), (chunk_size, runs.batch_sizes)


@pytest.mark.parametrize("family", families_with(has_layout("global_and_local_views"), not_(pins_its_prompt)))
def test_a_prefix_cache_resumes_inside_an_image_of_crops(family):
    upstream, ours = model_pair(family)
    first = Prompt(ours.config, [[2, 10], IMAGE, [11, 12]], image_seeds=[2])
    # Another question about the same image resumes after it: nothing is encoded
    store = PrefixCache(max_bytes=2**26)
    generate_logits(ours, first.inputs(), max_new_tokens=1, prefix_cache=store, **no_placeholder_answers(ours))
    second = Prompt(ours.config, [[2, 10], IMAGE, [40, 41]], image_seeds=[2])
    with encoder_runs(ours) as runs:
        _, logits = generate_logits(ours, second.inputs(), max_new_tokens=1, prefix_cache=store)
    assert_close(logits[0], uncached_logits(upstream, second.inputs()))
    assert runs.batch_sizes == [], "the image is inside the restored prefix"
    # A cache that ends inside the first crop's run, or inside the global view's run: the image is encoded once
    image_runs = _placeholder_positions(first, ours.config.image_token_id)
    for cut in (image_runs[0] + 1, image_runs[-1]):
        cache = cropped_cache(upstream, first.inputs(), cut)
        with encoder_runs(ours) as runs:
            _, logits = generate_logits(ours, first.inputs(), max_new_tokens=1, cache=cache)
        assert_close(logits[0], uncached_logits(upstream, first.inputs()))
        assert runs.batch_sizes == [1], (cut, runs.batch_sizes)


@pytest.mark.parametrize("family", GLOBAL_AND_LOCAL_FAMILIES)
def test_global_and_local_views_refused_clearly(family):
    _, ours = model_pair(family)
    inputs = Prompt(ours.config, SLICED, image_seeds=SLICED_SEEDS).inputs()
    wrong_counts = {**inputs, "num_local_patches": torch.tensor([1, 2])}
    with pytest.raises(ValueError, match="does not match the 2 image"):
        ours.generate(**wrong_counts, max_new_tokens=1)
    without_global = {key: value for key, value in inputs.items() if key != "pixel_values"}
    with pytest.raises(ValueError, match="without `pixel_values`"):
        ours.check_pixel_inputs(without_global)
    larger = {**inputs, "pixel_values": torch.nn.functional.pad(inputs["pixel_values"], (0, 32, 0, 32))}
    if ours.item_token_counts(larger) == ours.item_token_counts(inputs):
        return  # a global view's tokens do not follow its size (DeepSeek-OCR-2's): larger views are valid
    with pytest.raises(ValueError, match="does not match the images' token counts"):
        ours.generate(**larger, max_new_tokens=1)


def _assert_greedy_beams_and_chunks_match_upstream(upstream, ours, inputs: dict) -> None:
    # Greedy, two beams and chunks of 2 give upstream's tokens and logits (upstream generates unchunked)
    for kwargs in ({}, {"num_beams": 2}, {"prefill_chunk_size": 2}):
        expected_sequences, expected_logits = generate_logits(
            upstream, inputs, **{k: v for k, v in kwargs.items() if k != "prefill_chunk_size"}
        )
        sequences, logits = generate_logits(ours, inputs, **kwargs)
        assert torch.equal(sequences, expected_sequences), kwargs
        assert_same_steps(logits, expected_logits)


def _minicpm_config_as_transformers_tester_builds_it() -> transformers.MiniCPMV4_6Config:
    # The shapes of transformers' MiniCPM-V 4.6 tester: attention before Gated DeltaNet, tied embeddings, no video
    # placeholder, 8 px patches on 32 px images (a 4x4 grid, one placeholder per view)
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]}
    text = tiny_text_config("qwen3_5_text", hidden_size=64, head_dim=32, num_attention_heads=4, num_key_value_heads=2)
    text.update(vocab_size=256, rope_parameters=rope, tie_word_embeddings=True, bos_token_id=0, eos_token_id=1)
    text.update(pad_token_id=2, layer_types=["full_attention", "linear_attention"], linear_conv_kernel_dim=2)
    text.update(linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=4, linear_num_value_heads=8)
    vision = tiny_vision_config(
        num_hidden_layers=2, image_size=32, patch_size=8, hidden_size=64, num_attention_heads=4
    )
    return transformers.MiniCPMV4_6Config(
        text_config=text, vision_config=vision, image_token_id=100, insert_layer_id=0
    )


def test_minicpm_as_transformers_tester_builds_it():
    config = _minicpm_config_as_transformers_tester_builds_it()
    upstream = tiny_model(transformers.MiniCPMV4_6ForConditionalGeneration, config)
    ours = vlmprep.MiniCPMV4_6ForConditionalGeneration(config).eval()
    ours.load_state_dict(upstream.state_dict())
    assert [modality.name for modality in ours.vision_facts.modalities] == ["image"]  # no video placeholder
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 99, (2, 7), generator=generator)
    ids[:, 3] = config.image_token_id  # one view of one placeholder per row, the views packed side by side
    pixels = torch.randn(1, 3, 8, 2 * 16 * 8, generator=generator)
    inputs = {"input_ids": ids, "pixel_values": pixels, "target_sizes": torch.tensor([[4, 4], [4, 4]])}
    _assert_greedy_beams_and_chunks_match_upstream(upstream, ours, inputs)


def test_step3p7_as_transformers_tester_builds_it():
    # The shapes of transformers' Step-3.7 tester: 16 px images of 4 px patches (one placeholder each), no crops and
    # no `num_local_patches`, full attention layers only, a batch of two
    text = tiny_text_config(None, hidden_size=16, intermediate_size=37, head_dim=8, max_position_embeddings=64)
    text.update(pad_token_id=1, bos_token_id=0, eos_token_id=2, moe_intermediate_size=8, n_routed_experts=4)
    text.update(num_experts_per_tok=2, share_expert_dim=8, layer_types=["full_attention"] * 2, sliding_window=64)
    vision = tiny_vision_config(image_size=16, patch_size=4, hidden_size=8, mlp_ratio=1.0)
    config = transformers.Step3p7Config(text_config=text, vision_config=vision, image_token_id=4)
    upstream = tiny_model(transformers.Step3p7ForConditionalGeneration, config)
    ours = vlmprep.Step3p7ForConditionalGeneration(config).eval()
    ours.load_state_dict(upstream.state_dict())
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 99, (2, 7), generator=generator)
    ids[:, 3] = config.image_token_id
    inputs = {"input_ids": ids, "pixel_values": torch.randn(2, 3, 16, 16, generator=generator)}
    _assert_greedy_beams_and_chunks_match_upstream(upstream, ours, inputs)


def test_a_global_view_on_another_canvas_is_not_resumed():
    # MiniCPM-V 4.7 stretches a global view's positions over its slices' canvas: the same global view (same pixels,
    # same ids) with fewer slices has other positions, so the stored KV of the first prompt must not be reused for it
    upstream, ours = model_pair("minicpmv4_7")
    stored = Prompt(ours.config, [[2, 10], IMAGE, [11, 12]], image_seeds=[2])
    inputs, ids = stored.inputs(), stored.input_ids[0].tolist()
    last_slice = ids.index(11) - max(i for i, token in enumerate(ids) if token == 9)  # its line break, run, markers
    columns = int(inputs["target_sizes"][-1].prod()) * ours.config.vision_config.patch_size
    fewer_slices = {
        "input_ids": torch.tensor([ids[: ids.index(11) - last_slice] + ids[ids.index(11) :]]),
        "pixel_values": inputs["pixel_values"][..., :-columns],
        "target_sizes": inputs["target_sizes"][:-1],
    }
    fewer_slices["mm_token_type_ids"] = (fewer_slices["input_ids"] == ours.config.image_token_id).long()
    positions = [ours.vision_position_ids(x["input_ids"], x)[1:, 0, 5:9] for x in (inputs, fewer_slices)]
    assert not torch.equal(*positions), "the global view's positions follow its canvas"
    store = PrefixCache(max_bytes=2**26)
    generate_logits(ours, inputs, max_new_tokens=1, prefix_cache=store)
    _, logits = generate_logits(ours, fewer_slices, max_new_tokens=1, prefix_cache=store)
    assert_close(logits[0], uncached_logits(upstream, fewer_slices))
