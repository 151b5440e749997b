"""The patch-grid layout's vision-config names: the shape of one patch (flattened or a small image, with or without
temporal patches), the error for pixels of another shape, and Kimi K2.5's counts with pooled frames.

The expected shapes are the processors' (`Qwen2VLImageProcessor`: `channels * temporal * patch**2` values per row;
PaddleOCR-VL's: a `(channels, patch, patch)` image per row; Cosmos3 Edge's video processor refuses any temporal patch
but 1), as each family's case builds its pixel rows, never the drop-ins'.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from support.registry import FAMILY_CASES
from support.traits import drop_in, families_with, has_layout, images_as_grids, not_
from vlmprep.generation.validation import cached_key_shape
from vlmprep.models.kimi_k25 import Kimi_K25ForConditionalGeneration
from vlmprep.models.paddleocr_vl import PaddleOCRVLForConditionalGeneration
from vlmprep.testing import IMAGE, tiny_config


# The token-grid layout's rows are squares of merged patches, not patches (tests/units/test_family_hooks.py)
@pytest.mark.parametrize("model_type", families_with(images_as_grids, not_(has_layout("token_grid_text_positions"))))
def test_patch_shape_is_the_processors(model_type):
    config = tiny_config(model_type)
    rows = FAMILY_CASES[model_type].build_inputs(config, [[5], IMAGE], [0])["pixel_values"]
    assert drop_in(model_type).vision_config_names.patch_shape_of(config.vision_config) == rows.shape[1:]


def test_flattened_patches_are_refused_where_the_tower_takes_patch_images():
    model = PaddleOCRVLForConditionalGeneration.__new__(PaddleOCRVLForConditionalGeneration)
    model.config = tiny_config("paddleocr_vl")  # the hooks read the config only
    grid = torch.tensor([[1, 4, 4]])
    with pytest.raises(ValueError, match=r"takes patches of shape \(16, 3, 4, 4\)"):
        model.check_pixel_inputs({"pixel_values": torch.zeros(16, 48), "image_grid_thw": grid})
    assert model.count_items({"pixel_values": torch.zeros(16, 3, 4, 4), "image_grid_thw": grid}) == 1


def test_kimi_pools_a_chunks_frames_into_one():
    model = Kimi_K25ForConditionalGeneration.__new__(Kimi_K25ForConditionalGeneration)
    model.config = tiny_config("kimi_k25")
    grids = torch.tensor([[1, 4, 4], [2, 4, 6], [4, 2, 4]])
    assert model.item_token_counts({"video_grid_thw": grids}, modality="video") == [4, 6, 2]


def test_latent_attention_caches_one_compressed_head():
    text_config = transformers.DeepseekV3Config(hidden_size=32, num_attention_heads=2, kv_lora_rank=16)
    assert cached_key_shape(text_config) == (1, 16)
    assert cached_key_shape(
        transformers.LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2)
    ) == (
        2,
        8,
    )
