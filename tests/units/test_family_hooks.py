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
from support.traits import facts, families_with, pads_images_to_batch
from vlmprep import LlavaForConditionalGeneration
from vlmprep.testing import IMAGE, VIDEO, VisionRunCounter, build_prompt, random_pixels, tiny_llava_config, tiny_model


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
    # `VisionFacts.image_items` (`batched(..., renamed_from=...)`): the processor's default output names the images `pixel_values_images`.
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


def _video_llava_prompt(config, segments: list, seeds: list[int]) -> dict:
    # As Video-LLaVA's processor builds them: a video is one run of `frames * (patches + 1)` placeholders
    return FAMILY_CASES["video_llava"].build_inputs(config, segments, seeds)


def _upstream_next_logits(upstream, inputs: dict) -> torch.Tensor:
    # The reference: one uncached forward of the whole prompt with the plain class
    with torch.no_grad():
        return upstream(**inputs, use_cache=False).logits[:, -1]


def _first_scores(model, inputs: dict, **kwargs) -> torch.Tensor:
    out = model.generate(
        **inputs, max_new_tokens=1, do_sample=False, output_scores=True, return_dict_in_generate=True, **kwargs
    )
    return out.scores[0]


class _TowerRuns:
    """Forward hook on a vision tower: the rows (frames or images) of each call."""

    def __init__(self, tower: torch.nn.Module):
        self.rows: list[int] = []
        self._handle = tower.register_forward_hook(lambda _, args, __: self.rows.append(args[0].shape[0]))

    def __enter__(self) -> _TowerRuns:
        return self

    def __exit__(self, *_) -> None:
        self._handle.remove()


@pytest.mark.parametrize(
    ("segments", "seeds"),
    [([[5], VIDEO, [7]], [1]), ([[5], IMAGE, [6], VIDEO, [7, 8]], [4, 1]), ([[5], VIDEO, [6], VIDEO, [7]], [1, 2])],
    ids=["video", "image_and_video", "two_videos"],
)
def test_video_llava_videos_match_transformers_and_are_encoded_once(segments, seeds):
    # Upstream's forward refuses `pixel_values_videos` next to prepared encoder outputs; the drop-in prepares videos
    # as a modality of their own, so every path gives the plain class's logits and each video's frames are encoded once.
    upstream, ours = model_pair("video_llava")
    inputs = _video_llava_prompt(ours.config, segments, seeds)
    videos = inputs["pixel_values_videos"]
    expected = _upstream_next_logits(upstream, inputs)
    assert _generate(ours, inputs) == _generate(upstream, inputs)
    for chunk_size in (None, 5, 17):
        ours.encoder_cache.clear()
        with _TowerRuns(ours.model.video_tower) as runs:
            torch.testing.assert_close(
                _first_scores(ours, inputs, prefill_chunk_size=chunk_size), expected, rtol=0, atol=1e-5
            )
        assert runs.rows == [videos.shape[0] * videos.shape[1]], "one tower run over every frame of every video"


def test_video_llava_two_videos_give_different_logits_upstream():
    # The tiny model can fail: another video changes upstream's logits
    upstream, ours = model_pair("video_llava")
    one, other = (_video_llava_prompt(ours.config, [[5], VIDEO, [7]], [seed]) for seed in (1, 2))
    assert torch.equal(one["input_ids"], other["input_ids"])
    assert not torch.allclose(_upstream_next_logits(upstream, one), _upstream_next_logits(upstream, other), atol=1e-3)


def test_video_llava_videos_without_their_frame_axis_are_refused_clearly():
    _, ours = model_pair("video_llava")
    inputs = _video_llava_prompt(ours.config, [[5], VIDEO, [7]], [1])
    inputs["pixel_values_videos"] = inputs["pixel_values_videos"][0]  # (frames, C, H, W): no video axis
    with pytest.raises(ValueError, match=r"pixel_values_videos` must be one tensor of shape \(num_videos, frames"):
        _generate(ours, inputs)


def test_video_llava_continuing_from_a_returned_cache_is_exact_and_encodes_only_the_new_video():
    upstream, ours = model_pair("video_llava")
    turn_1 = _video_llava_prompt(ours.config, [[5], VIDEO, [7]], [1])
    out = ours.generate(**turn_1, max_new_tokens=2, do_sample=False, return_dict_in_generate=True)
    both = _video_llava_prompt(ours.config, [[5], VIDEO, [7], IMAGE, [9], VIDEO, [10]], [1, 4, 2])
    generated = out.sequences[0, turn_1["input_ids"].shape[1] :].tolist()
    # The second turn: the first turn's prompt and answer, then a new image and video
    ids = both["input_ids"][0].tolist()
    cut = turn_1["input_ids"].shape[1]
    conversation = {**both, "input_ids": torch.tensor([ids[:cut] + generated + ids[cut:]])}
    ours.encoder_cache.clear()
    with _TowerRuns(ours.model.video_tower) as runs:
        scores = _first_scores(ours, conversation, cache=out.cache, prefill_chunk_size=6)
    torch.testing.assert_close(scores, _upstream_next_logits(upstream, conversation), rtol=0, atol=1e-5)
    assert runs.rows == [both["pixel_values_videos"].shape[1]], "only the new video's frames are encoded"


@pytest.mark.parametrize("family", families_with(pads_images_to_batch))
def test_an_image_selected_from_a_padded_batch_is_unpadded(family):
    # `ItemSchema.unpad`: a processor pads images (Pixtral: to the largest size; any-res: to the most
    # crops) to batch them; the selected image's inputs, and so its hash, are those of the image alone.
    _, ours = model_pair(family)
    batch = FAMILY_CASES[family].build_inputs(ours.config, [IMAGE, [5], IMAGE], [2, 0])
    small = ours.select_item_inputs(batch, [0])
    height, width = (int(side) for side in batch["image_sizes"][0])
    if facts(family).pixel_layout == "up_to_size":
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
        model.check_pixel_inputs({"pixel_values": torch.zeros(28, 48), "image_grid_thw": grid})
