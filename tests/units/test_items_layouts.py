"""The item vocabulary the image layouts state: items without rows of a flat input (`Sizes(empty_items=True)`) and
indices into another flat input's rows, moved with them (`flat(..., rebased_on=)`)."""

from __future__ import annotations

import torch

from vlmprep.generation.items import ItemSchema, Sizes, batched, flat, join_item_inputs


def test_items_without_rows_of_a_flat_input_keep_their_place():
    # DeepSeek-OCR-2: three images, the second without crops
    schema = ItemSchema(
        (
            batched("pixel_values"),
            flat("pixel_values_local", Sizes("num_local_patches", empty_items=True)),
            batched("num_local_patches"),
        ),
        counted_by=("pixel_values",),
    )
    inputs = {
        "pixel_values": torch.arange(3.0).reshape(3, 1),
        "pixel_values_local": torch.arange(5.0).reshape(5, 1),
        "num_local_patches": torch.tensor([2, 0, 3]),
    }
    assert schema.count(None, inputs) == 3
    third = schema.select(None, inputs, [2])
    assert third["pixel_values_local"].flatten().tolist() == [2.0, 3.0, 4.0]
    second = schema.select(None, inputs, [1])
    assert "pixel_values_local" not in second, "no crops selected: the input is left out, as the processor does"
    assert second["num_local_patches"].tolist() == [0]
    joined = join_item_inputs(schema, [schema.select(None, inputs, [index]) for index in range(3)])
    assert all(torch.equal(joined[key], value) for key, value in inputs.items())


def test_indices_into_another_flat_input_move_with_its_rows():
    # Molmo2 on transformers 5.24: pooling rows index the patches of every crop of the call (2 patches per crop)
    schema = ItemSchema(
        (
            flat("pixel_values", Sizes("num_crops")),
            flat("pooling", Sizes("num_tokens"), rebased_on="pixel_values"),
            batched("num_crops"),
            batched("num_tokens"),
        )
    )
    inputs = {
        "pixel_values": torch.zeros(3, 2, 4),  # image 0: one crop, image 1: two crops
        "num_crops": torch.tensor([1, 2]),
        "pooling": torch.tensor([[0, 1], [2, -1], [4, 5]]),
        "num_tokens": torch.tensor([1, 2]),
    }
    second = schema.select(None, inputs, [1])
    assert second["pooling"].tolist() == [[0, -1], [2, 3]], "rebased to the selection's first crop, padding kept"
    reordered = schema.select(None, inputs, [1, 0])
    assert reordered["pooling"].tolist() == [[0, -1], [2, 3], [4, 5]]
    joined = join_item_inputs(schema, [schema.select(None, inputs, [0]), second])
    assert torch.equal(joined["pooling"], inputs["pooling"])
