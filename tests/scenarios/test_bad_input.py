"""Bad input raises a `ValueError` (or `TypeError`) that names the problem and the fix; the model stays exact after.

Every family runs the cases of `BAD_INPUTS` (each a `bad_input_<case>` conformance scenario); the Qwen-like and GLM-4V
families add the cases of their flattened patch rows indexed by grids and of their videos.
"""

from __future__ import annotations

import re

import pytest
import torch
from transformers import DynamicCache

from conftest import ALL_FAMILIES, model_pair
from support.caller_caches import cache_of
from support.references import SYSTEM, USER, Prompt, assert_close, collate, generate_logits, reference_next_logits
from support.registry import declare_scenario, skip_marks
from support.traits import (
    families_with,
    has_layout,
    has_multimodal_rope,
    images_as_grids,
    qwen_like_prompts,
    sampled,
    videos_as_one_run,
    videos_behind_image_placeholders,
)
from vlmprep.generation.validation import cached_key_shapes
from vlmprep.testing import IMAGE, VIDEO

SHORT_SYSTEM = [2, 10, 11, 12, 13]
# Images as patch rows indexed by grids: the Qwen-like families, and a sample of GLM's (GLM-4V finds image and video
# placeholders by one token id: as upstream, one forward holds only one of them)
PATCH_GRID_FAMILIES = families_with(
    images_as_grids, lambda family: qwen_like_prompts(family) or sampled("bad_patch_input")(family)
)


def _filled_cache(key_shapes: list[tuple[int, int]], length: int, batch: int = 1) -> DynamicCache:
    """A cache of `length` zero keys and values per layer, layer `i` with `key_shapes[i]`'s heads and head dim."""
    cache = DynamicCache()
    for layer, (heads, head_dim) in enumerate(key_shapes):
        states = torch.zeros(batch, heads, length, head_dim)
        cache.update(states, states.clone(), layer)
    return cache


def _key_shapes(model) -> list[tuple[int, int]]:
    """`(heads, last dimension)` of the keys each cache layer of the model holds: its own statement for every layer
    (GLM-5-Next caches a compressed latent), or each layer's key-value heads and head dimension (Gemma 4's
    full-attention layers have their own); one per layer, or per pass of a looped layer (Inkling2-Loop)."""
    text_config = model.config.get_text_config(decoder=True)
    stated = model.cached_key_shape()
    return [stated] * len(cached_key_shapes(text_config)) if stated else cached_key_shapes(text_config)


def _pixel_inputs(prompt: Prompt) -> dict:
    return {key: value for key, value in prompt.inputs().items() if key in prompt.case.pixel_keys}


def _item_modality(model):
    # The modality of the suite's items: images, or the videos of a family without images (InstructBLIP-Video)
    return model.vision_facts.modalities[0]


def _patch_count_message(model, inputs: dict) -> str | None:
    # Fuyu's and Inkling's items are patches, one per placeholder (their layouts): their message counts patches and
    # placeholders.
    if not has_layout("linear_patches", "patch_items_and_audio")(model.config.model_type):
        return None
    patches = inputs["pixel_values"].shape[0]
    placeholders = int((inputs["input_ids"] == model.config.image_token_id).sum())
    return f"`pixel_values` holds {patches} image patches but the prompt has {placeholders} image placeholder tokens"


def _case_too_many_images(model, prompt):
    # The ids of a one-image prompt with the pixel inputs of a two-image one, in the family's own layout
    two = Prompt(model.config, [SHORT_SYSTEM, IMAGE, [30], IMAGE, [31]])
    inputs = {**prompt.inputs(), **_pixel_inputs(two)}
    name = _item_modality(model).name
    return inputs, _patch_count_message(
        model, inputs
    ) or f"2 {name}(s) were passed but the prompt has 1 {name} placeholder run"


def _case_too_few_images(model, prompt):
    two = Prompt(model.config, [SHORT_SYSTEM, IMAGE, [30], IMAGE, [31]])
    inputs = {**two.inputs(), **_pixel_inputs(prompt)}
    # Families whose token counts depend on the images notice it while splitting the runs
    name = _item_modality(model).name
    messages = (f"1 {name}(s) were passed but the prompt has 2", f"more {name} placeholder tokens than the 1 {name}s")
    return inputs, _patch_count_message(model, inputs) or messages


def _case_wrong_run_length(model, prompt):
    inputs = prompt.inputs()
    ids = inputs["input_ids"].clone()
    first = int((ids[0] == _item_modality(model).placeholder_id(model.config)).nonzero()[0])
    ids[0, first] = 33  # one placeholder fewer
    inputs["input_ids"] = ids
    if "token_type_ids" in inputs and model.config.model_type == "gemma3":
        inputs["token_type_ids"] = (ids == model.config.image_token_id).long()
    return inputs, _patch_count_message(
        model, inputs
    ) or f"does not match the {_item_modality(model).name}s' token counts"


def _case_placeholders_without_pixels(model, prompt):
    return prompt.inputs(with_pixels=False), "no pixel inputs were passed"


def _case_cache_longer_than_prompt(model, prompt):
    cache = _filled_cache(_key_shapes(model), prompt.length + 2)
    return {**prompt.inputs(), "cache": cache}, "the cache already holds"


def _case_cache_from_other_layer_count(model, prompt):
    shapes = _key_shapes(model)
    cache = _filled_cache([*shapes, shapes[-1]], 3)
    return {**prompt.inputs(), "cache": cache}, "made by another model"


def _case_cache_from_other_head_shape(model, prompt):
    cache = _filled_cache([(heads + 1, head_dim * 2) for heads, head_dim in _key_shapes(model)], 3)
    return {**prompt.inputs(), "cache": cache}, "made by another model"


def _case_attention_mask_mismatch(model, prompt):
    return {**prompt.inputs(), "attention_mask": torch.ones(1, prompt.length - 2, dtype=torch.long)}, "attention_mask"


def _case_token_type_ids_mismatch(model, prompt):
    return {**prompt.inputs(), "token_type_ids": torch.zeros(1, prompt.length + 1, dtype=torch.long)}, "token_type_ids"


def _malformed_pixels(prompt: Prompt, channels: bool) -> dict:
    # The prompt's own pixel tensor, in the family's layout, with one channel or twice the height and width
    inputs = prompt.inputs()
    key = prompt.case.pixel_keys[0]
    pixels = inputs[key]
    if pixels.ndim >= 4 and channels:  # (..., C, H, W): the first channel only
        pixels = pixels[..., :1, :, :]
    elif pixels.ndim >= 4:  # (..., C, 2 * H, 2 * W): zero-padded well beyond the tower's image size
        pixels = torch.nn.functional.pad(pixels, (0, pixels.shape[-1], 0, pixels.shape[-2]))
    elif channels:  # flattened patches (..., patch_dim): a third of the columns, as for one of 3 channels
        pixels = pixels[..., : pixels.shape[-1] // 3]
    else:  # (..., 2 * patch_dim): patches of another size
        pixels = torch.cat([pixels, pixels], dim=-1)
    return {**inputs, key: pixels}


def _case_wrong_resolution(model, prompt):
    return _malformed_pixels(prompt, channels=False), "vision tower takes"


def _case_wrong_channels(model, prompt):
    return _malformed_pixels(prompt, channels=True), "vision tower takes"


BAD_INPUTS = {name.removeprefix("_case_"): case for name, case in dict(globals()).items() if name.startswith("_case_")}
for _case in BAD_INPUTS:  # each case is a conformance scenario of its own, which a family's case may skip
    declare_scenario(f"bad_input_{_case}", "tests/scenarios/test_bad_input.py")


def _family_case_params() -> list:
    return [
        pytest.param(family, case, id=f"{family}-{case}", marks=skip_marks(family, f"bad_input_{case}"))
        for family in ALL_FAMILIES
        for case in sorted(BAD_INPUTS)
    ]


@pytest.mark.parametrize(("family", "case"), _family_case_params())
def test_bad_input_raises_clear_error_then_model_still_exact(family, case):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SHORT_SYSTEM, IMAGE, [30, 31]])
    inputs, message = BAD_INPUTS[case](ours, prompt)
    messages = message if isinstance(message, tuple) else (message,)
    with pytest.raises(ValueError, match="(?i)" + "|".join(re.escape(m) for m in messages)):
        ours.generate(**inputs, max_new_tokens=2, do_sample=False)
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1)
    assert_close(logits[0], reference_next_logits(upstream, prompt))


# -- Flattened patch rows indexed by grids (Qwen-like families, GLM-4V) -----------------------------------------


def _patch_case_extra_image(model, prompt):
    other = Prompt(model.config, [[5], IMAGE], image_seeds=[9])
    inputs = prompt.inputs()
    for key in ("pixel_values", "image_grid_thw"):
        inputs[key] = torch.cat([inputs[key], other.full_inputs[key]])
    return inputs, "2 image(s) were passed but the prompt has 1 image placeholder run"


def _patch_case_missing_image(model, prompt):
    two = Prompt(model.config, [SYSTEM, IMAGE, [30], IMAGE, [31]], image_seeds=[0, 1])
    inputs = two.inputs()
    first_rows = int(inputs["image_grid_thw"][0].prod())
    inputs["pixel_values"] = inputs["pixel_values"][:first_rows]
    inputs["image_grid_thw"] = inputs["image_grid_thw"][:1]
    return inputs, "more image placeholder tokens than the 1 images passed need"


def _patch_case_missing_video(model, prompt):
    with_video = Prompt(model.config, [SYSTEM, VIDEO, [30]], image_seeds=[0])
    inputs = with_video.inputs(with_pixels=False)
    return inputs, "video placeholder run(s) after the 0 cached tokens"


def _patch_case_grid_without_pixels(model, prompt):
    inputs = prompt.inputs()
    inputs.pop("pixel_values")
    return inputs, "no `pixel_values` was passed"


def _patch_case_patch_rows_of_another_size(model, prompt):
    inputs = prompt.inputs()
    inputs["pixel_values"] = inputs["pixel_values"][:-1]
    return inputs, "vision tower takes flattened patches"


def _patch_case_cached_image_without_grid(model, prompt):
    upstream, _ = model_pair(model.config.model_type)
    cache = cache_of(upstream, prompt.inputs(length=prompt.length - 1))
    return {**prompt.inputs(with_pixels=False), "cache": cache}, "no `image_grid_thw`"


def _patch_case_only_new_tokens_after_cache(model, prompt):
    upstream, _ = model_pair(model.config.model_type)
    cache = cache_of(upstream, prompt.inputs(length=prompt.length - 2))
    inputs = {
        "input_ids": prompt.input_ids[:, -2:],
        "attention_mask": torch.ones(1, prompt.length, dtype=torch.long),
        "cache": cache,
    }
    return inputs, "computed from the whole prompt"


PATCH_BAD_INPUTS = {
    name.removeprefix("_patch_case_"): case
    for name, case in dict(globals()).items()
    if name.startswith("_patch_case_")
}


@pytest.mark.parametrize("case", sorted(PATCH_BAD_INPUTS))
@pytest.mark.parametrize("family", PATCH_GRID_FAMILIES)
def test_bad_patch_input_raises_clear_error(family, case):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[0])
    inputs, message = PATCH_BAD_INPUTS[case](ours, prompt)
    with pytest.raises(ValueError, match=re.escape(message)):
        ours.generate(**inputs, max_new_tokens=2, do_sample=False)
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1)
    assert_close(logits[0], reference_next_logits(upstream, prompt))


# -- A batch row whose attention mask is all zeros ---------------------------------------------------------------


def _batch_with_an_empty_row(model) -> tuple[Prompt, dict]:
    prompt = Prompt(model.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[0])
    batch = collate([prompt, Prompt(model.config, [SYSTEM, [30, 31, 32]])], model.generation_config.pad_token_id)
    batch["attention_mask"][1] = 0
    return prompt, batch


@pytest.mark.parametrize(
    "family",
    families_with(
        lambda family: (
            qwen_like_prompts(family) or (videos_behind_image_placeholders(family) and has_multimodal_rope(family))
        )
    ),
)
def test_all_zero_mask_row_is_refused_before_multimodal_positions(family, monkeypatch):
    # Upstream's `get_rope_index` fails on such a row with "torch.cat(): expected a non-empty list of Tensors"
    upstream, ours = model_pair(family)
    prompt, batch = _batch_with_an_empty_row(ours)
    calls = []
    monkeypatch.setattr(ours.model, "get_rope_index", lambda *args, **kwargs: calls.append(args))
    with pytest.raises(ValueError, match=re.escape("`attention_mask` row(s) [1] are all zeros")):
        ours.generate(**batch, max_new_tokens=1, do_sample=False)
    assert calls == []
    monkeypatch.undo()
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1)
    assert_close(logits[0], reference_next_logits(upstream, prompt))


@pytest.mark.parametrize("family", families_with(sampled("all_zero_mask_row")))
def test_all_zero_mask_row_runs_where_transformers_runs_it(family):
    # Families without multimodal rope take such a row as transformers does (it attends to nothing): the other rows
    # are exact. (Checked over every registered family when the check above was added: only multimodal rope fails.)
    upstream, ours = model_pair(family)
    prompt, batch = _batch_with_an_empty_row(ours)
    _, logits = generate_logits(ours, batch, max_new_tokens=1)
    assert_close(logits[0][0], reference_next_logits(upstream, prompt)[0])


# -- Videos without what tells them apart, or without their pixels ----------------------------------------------------


def test_glm4v_videos_need_token_types():
    _, ours = model_pair("glm4v")
    inputs = Prompt(ours.config, [SYSTEM, VIDEO, USER], image_seeds=[0]).inputs()
    inputs.pop("mm_token_type_ids")
    with pytest.raises(ValueError, match="share the image placeholder token"):
        ours.generate(**inputs, max_new_tokens=1)


@pytest.mark.parametrize("family", families_with(videos_as_one_run))
def test_video_placeholders_without_pixels_raise(family):
    _, ours = model_pair(family)
    inputs = Prompt(ours.config, [SYSTEM, VIDEO, USER], image_seeds=[0]).inputs(with_pixels=False)
    with pytest.raises(ValueError, match="video placeholder run"):
        ours.generate(**inputs, max_new_tokens=1)


# -- Arguments of generate -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [2.5, "8", 0, -1, True])
def test_bad_prefill_chunk_size_is_a_clear_type_error(chunk_size):
    _, ours = model_pair("llava")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, USER])
    with pytest.raises(TypeError, match="prefill_chunk_size"):
        ours.generate(**prompt.inputs(), max_new_tokens=1, prefill_chunk_size=chunk_size)


def test_empty_prompt_is_refused_clearly():
    _, ours = model_pair("llava")
    with pytest.raises(ValueError, match="empty"):
        ours.generate(input_ids=torch.zeros(1, 0, dtype=torch.long), max_new_tokens=1)


@pytest.mark.parametrize("bad_value", [float("nan"), float("inf")])
@pytest.mark.parametrize("family", families_with(sampled("pixel_checks")))
def test_non_finite_pixels_are_refused_before_encoding(family, bad_value):
    _, ours = model_pair(family)
    inputs = Prompt(ours.config, [SYSTEM, IMAGE, USER]).inputs()
    inputs["pixel_values"] = inputs["pixel_values"].clone()
    inputs["pixel_values"].view(-1)[3] = bad_value
    with pytest.raises(ValueError, match="NaN or infinite"):
        ours.generate(**inputs, max_new_tokens=1)
