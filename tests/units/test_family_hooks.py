"""The family hooks and the input facts they apply.

A family's override of a hook (`item_token_counts`, `count_items`, `select_item_inputs`) is what generation calls;
each hook has one name.
The default `select_item_inputs` applies the facts that normalise the selected images' inputs (an old pixel input name,
a batch's padding). The reference for generated tokens is the plain transformers class with the same weights.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import transformers
from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

from conftest import model_pair
from support.registry import FAMILY_CASES
from vlmprep import LlavaForConditionalGeneration
from vlmprep.testing import IMAGE, VisionRunCounter, build_prompt, random_pixels, tiny_llava_config, tiny_model


def _inputs(config) -> dict:
    ids, _ = build_prompt(config, [[5, 6], IMAGE, [7], IMAGE, [8, 9]])
    return {"input_ids": torch.tensor([ids]), "pixel_values": random_pixels(2, seed=3)}


def _generate(model, inputs: dict) -> list[int]:
    return model.generate(**inputs, max_new_tokens=3, do_sample=False)[0].tolist()


def test_hook_overrides_are_what_generation_calls():
    calls = {"item_token_counts": 0, "count_items": 0, "select_item_inputs": 0}

    class CountingLlava(LlavaForConditionalGeneration):
        # Each override delegates to the layout's implementation through `super()`.
        def item_token_counts(self, model_kwargs, modality="image"):
            calls["item_token_counts"] += 1
            return super().item_token_counts(model_kwargs, modality)

        def count_items(self, model_kwargs, modality="image"):
            calls["count_items"] += 1
            return super().count_items(model_kwargs, modality)

        def select_item_inputs(self, model_kwargs, indices, modality="image"):
            calls["select_item_inputs"] += 1
            return super().select_item_inputs(model_kwargs, indices, modality)

    config = tiny_llava_config()
    ours = tiny_model(CountingLlava, config)
    theirs = tiny_model(transformers.LlavaForConditionalGeneration, config)
    inputs = _inputs(config)
    assert _generate(ours, inputs) == _generate(theirs, inputs)
    assert all(count > 0 for count in calls.values()), calls


def test_hooks_have_one_name_each():
    # No aliases in 0.x: the image-named spellings of the item hooks do not exist.
    model = tiny_model(LlavaForConditionalGeneration, tiny_llava_config())
    for old in ("image_token_counts", "count_images", "select_image_inputs"):
        assert not hasattr(model, old), old


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


def test_video_llava_videos_are_refused_clearly():
    # Upstream runs a video prompt; the drop-in prepares images only, and its prepared (empty) encoder outputs next to
    # `pixel_values_videos` made upstream's forward fail with "cannot specify both" (transformers' own Video-LLaVA
    # generation tests): a `ValueError` saying what to use instead.
    upstream, ours = model_pair("video_llava")
    config = ours.config
    frames = 8  # Video-LLaVA's videos: 8 frames, each its patch tokens and CLS
    video_tokens = frames * (ours.item_token_counts({}) + 1)
    image = FAMILY_CASES["video_llava"].build_inputs(config, [[5], IMAGE, [7]], [4])
    ids = [[5, *image["input_ids"][0][1:-1].tolist(), 6, *[config.video_token_index] * video_tokens, 7]]
    size = config.vision_config.image_size
    videos = torch.rand(1, frames, 3, size, size, generator=torch.Generator().manual_seed(1))
    for inputs in (
        {
            "input_ids": torch.tensor([[5, *[config.video_token_index] * video_tokens, 7]]),
            "pixel_values_videos": videos,
        },
        {"input_ids": torch.tensor(ids), "pixel_values": image["pixel_values"], "pixel_values_videos": videos},
    ):
        assert len(_generate(upstream, inputs)) == inputs["input_ids"].shape[1] + 3
        with pytest.raises(
            ValueError, match=r"Videos are not prepared.*transformers\.VideoLlavaForConditionalGeneration"
        ):
            _generate(ours, inputs)


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


def test_token_grid_layout_counts_one_placeholder_and_one_pixel_square_per_grid_cell():
    # Inkling2's grid counts placeholders (the patch-grid layout's counts patches, merged 2x2 into one placeholder)
    from vlmprep.models.inkling2 import Inkling2ForConditionalGeneration
    from vlmprep.testing.configs import tiny_inkling2_config

    model = Inkling2ForConditionalGeneration(tiny_inkling2_config())
    grid = torch.tensor([[1, 2, 2], [1, 1, 3]])
    squares = torch.arange(7.0).reshape(7, 1, 1, 1).expand(7, 8, 8, 3)  # one (8, 8, 3) square per placeholder
    inputs = {"pixel_values": squares, "image_grid_thw": grid}
    assert model.item_token_counts(inputs) == [4, 3]
    assert model.count_items(inputs) == 2
    second = model.select_item_inputs(inputs, [1])
    assert second["pixel_values"][:, 0, 0, 0].tolist() == [4.0, 5.0, 6.0]
    assert second["image_grid_thw"].tolist() == [[1, 1, 3]]
    with pytest.raises(ValueError, match=r"shape \(7, 8, 8, 3\)"):  # flattened patches, as a Qwen2-VL processor gives
        model.count_items({"pixel_values": torch.zeros(28, 48), "image_grid_thw": grid})
