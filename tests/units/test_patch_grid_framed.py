"""HunYuanVL's framed runs (`layouts.patch_grid_framed`): an image's run holds its row separators and its begin and
end embeddings; a batch with images in more than one row is refused (upstream numbers images across the batch)."""

from __future__ import annotations

import pytest
import torch

from conftest import model_pair
from support.generation_checks import assert_generate_matches_upstream
from support.references import SYSTEM, USER, Prompt, collate
from vlmprep.testing import IMAGE


def test_an_images_run_holds_its_separators_and_frame():
    _, ours = model_pair("hunyuan_vl")
    # 4x4 patches merged 2x2: 2 rows of 2, a separator after each row, then begin and end
    assert ours.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])}) == [2 * 3 + 2, 1 * 3 + 2]


def test_upstream_numbers_images_across_the_batch_and_the_drop_in_refuses_it():
    upstream, ours = model_pair("hunyuan_vl")
    one = Prompt(ours.config, [SYSTEM, IMAGE, USER], image_seeds=[1])
    two = Prompt(ours.config, [SYSTEM, IMAGE, USER], image_seeds=[2])
    batch = collate([one, two], pad_token_id=0)
    with torch.no_grad():  # row 1's image gets image index 1 beside row 0: not its solo run
        batched = upstream(**batch, use_cache=False).logits[1, -1]
        alone = upstream(**two.inputs(), use_cache=False).logits[0, -1]
    assert not torch.allclose(batched, alone, atol=1e-5)
    with pytest.raises(ValueError, match="2 rows of this batch hold images"):
        ours.generate(**batch, max_new_tokens=1)


def test_a_text_row_may_share_a_batch_with_an_image_row():
    upstream, ours = model_pair("hunyuan_vl")
    text = Prompt(ours.config, [SYSTEM, USER])
    image = Prompt(ours.config, [SYSTEM, IMAGE, USER], image_seeds=[3])
    batch = collate([text, image], pad_token_id=0)
    assert_generate_matches_upstream(upstream, ours, batch, "greedy", max_new_tokens=2)
