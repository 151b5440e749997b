"""Unit tests of the input checks: each failure names what was expected."""

from __future__ import annotations

import pytest
import torch
from transformers import SiglipVisionConfig

from vlmprep.generation.validation import check_pixel_dims, check_pixel_shapes, check_sequence_input

VISION = SiglipVisionConfig(image_size=16, patch_size=4, num_channels=3)


def test_fixed_resolution_images():
    check_pixel_shapes(torch.zeros(2, 3, 16, 16), VISION)
    with pytest.raises(ValueError, match=r"takes \(num_images, 3, 16, 16\)"):
        check_pixel_shapes(torch.zeros(2, 3, 24, 24), VISION)
    with pytest.raises(ValueError, match="takes"):
        check_pixel_shapes(torch.zeros(2, 1, 16, 16), VISION)


def test_crops_and_up_to_size_layouts():
    check_pixel_dims(torch.zeros(2, 3, 3, 16, 16), VISION, leading=("num_images", "crops"))
    with pytest.raises(ValueError, match=r"\(num_images, crops, 3, 16, 16\)"):
        check_pixel_dims(torch.zeros(2, 3, 3, 8, 8), VISION, leading=("num_images", "crops"))
    check_pixel_dims(torch.zeros(1, 3, 8, 12), VISION, up_to_size=True)  # smaller, patch multiples: fine
    for bad in (torch.zeros(1, 3, 20, 16), torch.zeros(1, 3, 10, 12), torch.zeros(1, 2, 8, 8)):
        with pytest.raises(ValueError, match="vision tower takes"):
            check_pixel_dims(bad, VISION, up_to_size=True)


def test_sequence_inputs_must_line_up_with_input_ids():
    check_sequence_input("attention_mask", torch.ones(2, 5), batch_size=2, lengths={5, 8})
    check_sequence_input("attention_mask", None, batch_size=2, lengths={5})
    with pytest.raises(ValueError, match=r"needs \(2, 5\) or \(2, 8\)"):
        check_sequence_input("attention_mask", torch.ones(2, 6), batch_size=2, lengths={5, 8})
