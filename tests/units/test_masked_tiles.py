"""The masked-tiles layout (Granite Docling): real tiles come from the per-tile mask, each is one item, and the fine
connector path is part of a tile's inputs (four times the placeholders, another hash)."""

from __future__ import annotations

import pytest
import torch

from vlmprep.cache.hashing import hash_item_inputs
from vlmprep.models.granite_docling import GraniteDoclingForConditionalGeneration
from vlmprep.testing.configs import tiny_granite_docling_config


@pytest.fixture(scope="module")
def model():
    return GraniteDoclingForConditionalGeneration(tiny_granite_docling_config()).eval()


def _inputs(**extra):
    pixel_values = torch.randn(2, 3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[True, True, True], [True, False, False]])  # the second sample has one tile, then padding
    return {"pixel_values": pixel_values, "pixel_attention_mask": mask, **extra}


def test_real_tiles_are_the_masked_ones_in_sample_order(model):
    inputs = _inputs()
    assert model.count_items(inputs) == 4
    selected = model.select_item_inputs(inputs, [3, 1])
    assert torch.equal(selected["pixel_values"][0, 0], inputs["pixel_values"][1, 0])
    assert torch.equal(selected["pixel_values"][0, 1], inputs["pixel_values"][0, 1])
    assert selected["pixel_attention_mask"].tolist() == [[True, True]]
    assert "tile_fine_mask" not in selected


def test_fine_path_has_four_times_the_placeholders_and_another_hash(model):
    coarse, fine = _inputs(), _inputs(tile_fine_mask=torch.tensor([True, True]))
    assert model.item_token_counts(fine) == 4 * model.item_token_counts(coarse) == 16
    fine_tile = model.select_item_inputs(fine, [0])
    assert fine_tile["tile_fine_mask"].tolist() == [True]
    assert hash_item_inputs(fine_tile) != hash_item_inputs(model.select_item_inputs(coarse, [0]))


def test_a_mask_that_is_not_per_tile_is_refused(model):
    inputs = _inputs()
    inputs["pixel_attention_mask"] = torch.ones(2, 3, 16, 16, dtype=torch.bool)  # Idefics3's per-pixel mask
    with pytest.raises(ValueError, match="one flag per tile"):
        model.count_items(inputs)
    with pytest.raises(ValueError, match="`pixel_attention_mask` `\\(batch_size, tiles\\)` is needed"):
        model.count_items({"pixel_values": inputs["pixel_values"]})
