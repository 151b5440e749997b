"""The family hooks and the input facts they apply.

The hooks were renamed from image names to item names: family classes written against the old names still work. An
override of an old name (`image_token_counts`, `count_images`, `select_image_inputs`) must be what generation calls,
with a `FutureWarning` when the class is defined; calling an old name calls the new one, with a `FutureWarning` once.
The default `select_item_inputs` applies the facts that normalise the selected images' inputs (an old pixel input name,
a batch's padding). The reference for generated tokens is the plain transformers class with the same weights.
"""

from __future__ import annotations

import warnings
from unittest import mock

import pytest
import torch
import transformers
from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

from conftest import model_pair
from support.registry import FAMILY_CASES
from vlmprep import LlavaForConditionalGeneration
from vlmprep.generation import hooks
from vlmprep.testing import IMAGE, VisionRunCounter, build_prompt, random_pixels, tiny_llava_config, tiny_model


def _inputs(config) -> dict:
    ids, _ = build_prompt(config, [[5, 6], IMAGE, [7], IMAGE, [8, 9]])
    return {"input_ids": torch.tensor([ids]), "pixel_values": random_pixels(2, seed=3)}


def _generate(model, inputs: dict) -> list[int]:
    return model.generate(**inputs, max_new_tokens=3, do_sample=False)[0].tolist()


def _old_name_family():
    calls = {"image_token_counts": 0, "count_images": 0, "select_image_inputs": 0}

    with pytest.warns(FutureWarning) as caught:

        class OldNameLlava(LlavaForConditionalGeneration):
            # Written against the old hook names, each delegating to the layout's implementation through `super()`.
            def image_token_counts(self, model_kwargs, modality="image"):
                calls["image_token_counts"] += 1
                return super().image_token_counts(model_kwargs, modality)

            def count_images(self, model_kwargs, modality="image"):
                calls["count_images"] += 1
                return super().count_images(model_kwargs, modality)

            def select_image_inputs(self, model_kwargs, indices, modality="image"):
                calls["select_image_inputs"] += 1
                return super().select_image_inputs(model_kwargs, indices, modality)

    renamed = sorted(str(warning.message).split("`")[1] for warning in caught if warning.category is FutureWarning)
    assert renamed == ["count_items", "item_token_counts", "select_item_inputs"], "one warning per overridden hook"
    return OldNameLlava, calls


def test_old_name_overrides_are_what_generation_calls():
    family, calls = _old_name_family()
    config = tiny_llava_config()
    ours = tiny_model(family, config)
    theirs = tiny_model(transformers.LlavaForConditionalGeneration, config)
    inputs = _inputs(config)
    with mock.patch.object(hooks, "_warned_calls", set()), warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        tokens = _generate(ours, inputs)
        # `super()` from an old-name override reaches the layout's implementation, not the mixin's default.
        assert ours.item_token_counts({}) == 16
    assert tokens == _generate(theirs, inputs)
    assert all(count > 0 for count in calls.values()), calls


def test_calling_an_old_name_warns_once_and_calls_the_new_one():
    model = tiny_model(LlavaForConditionalGeneration, tiny_llava_config())
    inputs = _inputs(model.config)
    with mock.patch.object(hooks, "_warned_calls", set()):
        with pytest.warns(FutureWarning, match="call `count_items`"):
            assert model.count_images(inputs) == model.count_items(inputs) == 2
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert model.count_images(inputs) == 2, "the second call does not warn again"
        with pytest.warns(FutureWarning, match="call `item_token_counts`"):
            assert model.image_token_counts({}) == model.item_token_counts({})
        selected = model.select_item_inputs(inputs, [1])
        with pytest.warns(FutureWarning, match="call `select_item_inputs`"):
            assert torch.equal(model.select_image_inputs(inputs, [1])["pixel_values"], selected["pixel_values"])


def test_new_name_overrides_do_not_warn_and_answer_old_names():
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class NewNameLlava(LlavaForConditionalGeneration):
            def item_token_counts(self, model_kwargs, modality="image"):
                return 7

    model = tiny_model(NewNameLlava, tiny_llava_config())
    with mock.patch.object(hooks, "_warned_calls", set()), pytest.warns(FutureWarning):
        assert model.image_token_counts({}) == 7


def test_video_llava_legacy_pixel_name_is_passed_and_hashed_as_pixel_values():
    # `VisionFacts.renamed_pixel_keys`: the processor's default output names the images `pixel_values_images`.
    upstream, ours = model_pair("video_llava")
    inputs = FAMILY_CASES["video_llava"].build_inputs(ours.config, [[5, 6], IMAGE, [7]], [4])
    legacy = {"input_ids": inputs["input_ids"], "pixel_values_images": inputs["pixel_values"]}
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # the tower is never given the deprecated argument
        tokens = _generate(ours, legacy)
    assert tokens == _generate(upstream, legacy)
    with VisionRunCounter(ours) as runs:
        assert _generate(ours, inputs) == tokens
    assert runs.images == 0, "the same image under its current name is an encoder-cache hit"


@pytest.mark.parametrize("family", ["mistral3", "llava_next"])
def test_an_image_selected_from_a_padded_batch_is_unpadded(family):
    # `VisionFacts.unpad_image_inputs`: a processor pads images (Pixtral: to the largest size; any-res: to the most
    # crops) to batch them; the selected image's inputs, and so its hash, are those of the image alone.
    _, ours = model_pair(family)
    batch = FAMILY_CASES[family].build_inputs(ours.config, [IMAGE, [5], IMAGE], [2, 0])
    small = ours.select_item_inputs(batch, [0])
    height, width = (int(side) for side in batch["image_sizes"][0])
    if family == "mistral3":
        alone = batch["pixel_values"][:1, :, :height, :width]
    else:
        crops = image_size_to_num_patches((height, width), ours.config.image_grid_pinpoints, 8)
        alone = batch["pixel_values"][:1, :crops]
    assert alone.shape != batch["pixel_values"][:1].shape, "the batch pads the first image"
    assert torch.equal(small["pixel_values"], alone)
    assert torch.equal(ours.select_item_inputs(batch, [1])["pixel_values"], batch["pixel_values"][1:])
