"""The item schema's vocabulary: counting, selecting, checking and joining items as each kind of input holds them."""

from types import SimpleNamespace

import pytest
import torch

from vlmprep.generation.items import (
    ItemSchema,
    Sizes,
    batched,
    clip,
    default_schema,
    flat,
    grid_rows,
    join_item_inputs,
    shared,
    sizes,
)

MODEL = SimpleNamespace(config=SimpleNamespace(patch_size=2))


def _patch_grid_inputs():
    grids = torch.tensor([[1, 2, 2], [1, 1, 3], [2, 1, 1]])  # 4, 3 and 2 patch rows
    return {"pixel_values": torch.arange(9.0).unsqueeze(-1).expand(9, 5), "image_grid_thw": grids}


def test_flat_rows_split_by_the_product_of_each_grid_row():
    schema = grid_rows("pixel_values", "image_grid_thw")
    inputs = _patch_grid_inputs()
    assert schema.count(MODEL, inputs) == 3
    selected = schema.select(MODEL, inputs, [2, 0])
    assert selected["pixel_values"][:, 0].tolist() == [7.0, 8.0, 0.0, 1.0, 2.0, 3.0]  # item 2's rows, then item 0's
    assert selected["image_grid_thw"].tolist() == [[2, 1, 1], [1, 2, 2]]
    # Grids alone count the items the cache holds (their positions need them)
    assert schema.count(MODEL, {"image_grid_thw": inputs["image_grid_thw"]}) == 3


def test_flat_rows_that_do_not_add_up_or_lack_their_sizes_are_refused():
    schema = grid_rows("pixel_values", "image_grid_thw")
    inputs = _patch_grid_inputs()
    with pytest.raises(ValueError, match=r"`pixel_values` holds 8 entries along axis 0 but `image_grid_thw` gives 3"):
        schema.count(MODEL, {**inputs, "pixel_values": inputs["pixel_values"][:8]})
    with pytest.raises(ValueError, match=r"`pixel_values` was passed without `image_grid_thw`"):
        schema.count(MODEL, {"pixel_values": inputs["pixel_values"]})


def test_flat_columns_along_the_last_axis_with_a_config_factor():
    # Packed views: each view `h * w * patch_size` pixel columns wide, side by side
    schema = ItemSchema(
        (flat("pixel_values", Sizes("target_sizes", "prod", times=lambda config: config.patch_size), -1),)
        + (batched("target_sizes"),)
    )
    target_sizes = torch.tensor([[1, 2], [1, 1]])  # 4 and 2 columns
    pixels = torch.arange(6.0).reshape(1, 1, 1, 6)
    inputs = {"pixel_values": pixels, "target_sizes": target_sizes}
    assert schema.count(MODEL, inputs) == 2
    assert schema.select(MODEL, inputs, [1])["pixel_values"].flatten().tolist() == [4.0, 5.0]


def test_groups_of_rows_per_sample_and_every_row_its_own_item_without_them():
    # LLaVA-OneVision: the images of a multi-image sample are one item; a text-only sample (0 images) is none
    schema = ItemSchema(
        (
            flat("pixel_values", Sizes("batch_num_images", one_each_without=True)),
            flat("image_sizes", Sizes("batch_num_images", one_each_without=True)),
            sizes("batch_num_images"),
        )
    )
    pixels, image_sizes = torch.arange(3.0), torch.tensor([[8, 8], [9, 9], [7, 7]])
    inputs = {"pixel_values": pixels, "image_sizes": image_sizes, "batch_num_images": [1, 0, 2]}
    assert schema.count(MODEL, inputs) == 2
    selected = schema.select(MODEL, inputs, [1])
    assert selected["pixel_values"].tolist() == [1.0, 2.0]
    assert selected["batch_num_images"] == [2]
    assert schema.count(MODEL, {"pixel_values": pixels, "image_sizes": image_sizes}) == 3


def test_clips_are_cut_to_the_longest_real_one_of_a_selection():
    schema = ItemSchema((clip("input_features", "feature_attention_mask", axis=-1),))
    features = torch.arange(2 * 3 * 6.0).reshape(2, 3, 6)  # (clips, mel bins, frames)
    mask = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0]])
    inputs = {"input_features": features, "feature_attention_mask": mask}
    assert schema.count(MODEL, inputs) == 2
    first = schema.select(MODEL, inputs, [0])
    assert first["input_features"].shape == (1, 3, 2) and first["feature_attention_mask"].tolist() == [[1, 1]]
    both = schema.select(MODEL, inputs, [1, 0])
    assert both["input_features"].shape == (2, 3, 4)


def test_renamed_inputs_carry_their_current_name_and_only_pixels_count():
    schema = ItemSchema((batched("pixel_values", renamed_from="pixel_values_images"),), counted_by=("pixel_values",))
    selected = schema.select(MODEL, {"pixel_values_images": torch.zeros(2, 3)}, [1])
    assert set(selected) == {"pixel_values"}
    assert default_schema().count(MODEL, {"image_sizes": torch.tensor([[8, 8]])}) is None


def test_shared_inputs_go_whole_with_any_selection():
    schema = ItemSchema((batched("pixel_values"), shared("vision_feature_layer")))
    selected = schema.select(MODEL, {"pixel_values": torch.zeros(3, 2), "vision_feature_layer": -2}, [0])
    assert selected["vision_feature_layer"] == -2


@pytest.mark.parametrize(
    "schema, inputs",
    [
        (grid_rows("pixel_values", "image_grid_thw"), _patch_grid_inputs()),
        (
            ItemSchema((clip("input_features", "feature_attention_mask", axis=1),)),
            {
                # (clips, frames, mel bins), the first clip's last 2 frames padding (zeros, as the extractor pads)
                "input_features": torch.arange(2 * 5 * 2.0).reshape(2, 5, 2)
                * torch.tensor([[1, 1, 1, 0, 0], [1] * 5])[..., None],
                "feature_attention_mask": torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]),
            },
        ),
        (default_schema(("pixel_values",), ()), {"pixel_values": torch.arange(12.0).reshape(3, 2, 2)}),
    ],
    ids=["flat", "clips", "batched"],
)
def test_joining_each_item_alone_gives_the_call_back(schema, inputs):
    items = schema.count(MODEL, inputs)
    joined = join_item_inputs(schema, [schema.select(MODEL, inputs, [index]) for index in range(items)])
    assert joined.keys() == inputs.keys()
    for key, value in inputs.items():
        assert torch.equal(joined[key], value), key


def test_joining_pads_batched_items_to_the_largest():
    schema = default_schema(("pixel_values",), ())
    joined = join_item_inputs(schema, [{"pixel_values": torch.ones(1, 2, 3)}, {"pixel_values": torch.ones(1, 4, 2)}])
    assert joined["pixel_values"].shape == (2, 4, 3)
    assert joined["pixel_values"][0, 2:].abs().sum() == 0
