"""Bad input raises a `ValueError` that names the problem and the fix; the model still generates exactly after."""

from __future__ import annotations

import re

import pytest
import torch
from transformers import DynamicCache

from conftest import ALL_FAMILIES, model_pair
from family_registry import FAMILY_CASES
from helpers import Prompt, assert_close, generate_logits, reference_next_logits
from vlmprep.testing import IMAGE

SYSTEM = [2, 10, 11, 12, 13]


def _filled_cache(num_layers: int, heads: int, head_dim: int, length: int, batch: int = 1) -> DynamicCache:
    cache = DynamicCache()
    for layer in range(num_layers):
        states = torch.zeros(batch, heads, length, head_dim)
        cache.update(states, states.clone(), layer)
    return cache


def _text_config(model):
    return model.config.get_text_config(decoder=True)


def _head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def _pixel_inputs(prompt: Prompt) -> dict:
    return {key: value for key, value in prompt.inputs().items() if key in prompt.case.pixel_keys}


def _case_too_many_images(model, prompt):
    # The ids of a one-image prompt with the pixel inputs of a two-image one, in the family's own layout
    two = Prompt(model.config, [SYSTEM, IMAGE, [30], IMAGE, [31]])
    inputs = {**prompt.inputs(), **_pixel_inputs(two)}
    return inputs, ("2 image(s) were passed but the prompt has 1 image placeholder run",)


def _case_too_few_images(model, prompt):
    two = Prompt(model.config, [SYSTEM, IMAGE, [30], IMAGE, [31]])
    inputs = {**two.inputs(), **_pixel_inputs(prompt)}
    # Families whose token counts depend on the images notice it while splitting the runs
    return inputs, ("1 image(s) were passed but the prompt has 2", "more image placeholder tokens than the 1 images")


def _case_wrong_run_length(model, prompt):
    inputs = prompt.inputs()
    ids = inputs["input_ids"].clone()
    first = int((ids[0] == model.config.image_token_id).nonzero()[0])
    ids[0, first] = 33  # one placeholder fewer
    inputs["input_ids"] = ids
    if "token_type_ids" in inputs and model.config.model_type == "gemma3":
        inputs["token_type_ids"] = (ids == model.config.image_token_id).long()
    return inputs, "does not match the images' token counts"


def _case_placeholders_without_pixels(model, prompt):
    return prompt.inputs(with_pixels=False), "no pixel inputs were passed"


def _case_cache_longer_than_prompt(model, prompt):
    config = _text_config(model)
    cache = _filled_cache(config.num_hidden_layers, config.num_key_value_heads, _head_dim(config), prompt.length + 2)
    return {**prompt.inputs(), "cache": cache}, "the cache already holds"


def _case_cache_from_other_layer_count(model, prompt):
    config = _text_config(model)
    cache = _filled_cache(config.num_hidden_layers + 1, config.num_key_value_heads, _head_dim(config), 3)
    return {**prompt.inputs(), "cache": cache}, "made by another model"


def _case_cache_from_other_head_shape(model, prompt):
    config = _text_config(model)
    cache = _filled_cache(config.num_hidden_layers, config.num_key_value_heads + 1, _head_dim(config) * 2, 3)
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


def _family_case_params() -> list:
    params = []
    for family in ALL_FAMILIES:
        for case in sorted(BAD_INPUTS):
            reason = FAMILY_CASES[family].skip.get(f"bad_input_{case}")
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            params.append(pytest.param(family, case, id=f"{family}-{case}", marks=marks))
    return params


@pytest.mark.parametrize(("family", "case"), _family_case_params())
def test_bad_input_raises_clear_error_then_model_still_exact(family, case):
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]])
    inputs, message = BAD_INPUTS[case](ours, prompt)
    messages = message if isinstance(message, tuple) else (message,)
    with pytest.raises(ValueError, match="(?i)" + "|".join(re.escape(m) for m in messages)):
        ours.generate(**inputs, max_new_tokens=2, do_sample=False)
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1)
    assert_close(logits[0], reference_next_logits(upstream, prompt))
