"""VideoLLaMA3's inputs (`layouts.merge_sized_grid`): per-item merge sizes and the video compression mask, refused
clearly when missing or of the wrong size."""

from __future__ import annotations

import pytest

from conftest import model_pair
from support.references import SYSTEM, Prompt
from vlmprep.testing import IMAGE, VIDEO

PROMPT = [SYSTEM, IMAGE, [3], VIDEO, [4]]


def test_placeholders_follow_each_items_merge_size_and_kept_rows():
    _, ours = model_pair("video_llama_3")
    inputs = Prompt(ours.config, PROMPT, image_seeds=[0, 1]).inputs()
    images = ours.item_token_counts(inputs)
    grids, merge_sizes = inputs["image_grid_thw"], inputs["image_merge_sizes"]
    assert images == [int(grid.prod()) // int(size) ** 2 for grid, size in zip(grids, merge_sizes, strict=True)]
    frames = ours.item_token_counts(inputs, modality="video")[0]
    assert sum(frames) == int(inputs["video_compression_mask"].sum())  # one run per frame of its kept rows


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda inputs: inputs.pop("image_merge_sizes"), "without `image_merge_sizes`"),
        (lambda inputs: inputs.pop("video_merge_sizes"), "without `video_merge_sizes`"),
        (
            lambda inputs: inputs.update(video_compression_mask=inputs["video_compression_mask"][:-1]),
            "`video_compression_mask` has shape",
        ),
        (lambda inputs: inputs.pop("video_compression_mask"), "does not match the videos' token counts"),
    ],
)
def test_missing_or_mis_sized_inputs_are_refused(change, message):
    _, ours = model_pair("video_llama_3")
    inputs = Prompt(ours.config, PROMPT, image_seeds=[0, 1]).inputs()
    change(inputs)
    with pytest.raises(ValueError, match=message):
        ours.generate(**inputs, max_new_tokens=1)
