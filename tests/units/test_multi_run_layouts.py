"""The multi-run layouts' arithmetic (`vlmprep.models.layouts.multi_run`), on their hooks alone (no model)."""

from __future__ import annotations

import pytest
import torch

from vlmprep.models.layouts.multi_run import GlobalAndLocalViewsLayout, PackedViewsLayout
from vlmprep.testing.configs import tiny_minicpmv4_6_config, tiny_step3p7_config


class PackedViews(PackedViewsLayout):
    def __init__(self, config):
        self.config = config


class GlobalAndLocalViews(GlobalAndLocalViewsLayout):
    def __init__(self, config, **facts):
        self.config = config
        vars(self).update(facts)

    def view_token_count(self, height: int, width: int) -> int:
        return height * width // 64  # an 8x8-pixel block per placeholder


def _packed(sizes: list[tuple[int, int]], patch: int = 4) -> dict:
    # Each view's columns hold its index, so a selection shows which views it took
    columns = [torch.full((1, 3, patch, h * w * patch), float(index)) for index, (h, w) in enumerate(sizes)]
    return {"pixel_values": torch.cat(columns, -1), "target_sizes": torch.tensor(sizes, dtype=torch.int32)}


def test_packed_view_counts_follow_the_mergers_and_the_mode():
    config = tiny_minicpmv4_6_config()
    views = PackedViews(config)
    sizes = {"target_sizes": torch.tensor([[8, 8], [4, 8]])}
    assert views.item_token_counts(sizes) == [4, 2]  # 2x2 window merger, then a 2x2 merger
    assert views.item_token_counts({**sizes, "downsample_mode": "4x"}) == [16, 8]  # no window merger
    config.merger_times = 2  # a second 2x2 merger round
    assert views.item_token_counts({"target_sizes": torch.tensor([[8, 8]])}) == [1]


def test_packed_views_select_their_own_columns():
    views = PackedViews(tiny_minicpmv4_6_config())
    inputs = _packed([(8, 8), (4, 8), (8, 4)])
    assert views.count_items(inputs) == 3
    selected = views.select_item_inputs(inputs, [2, 0])
    assert selected["target_sizes"].tolist() == [[8, 4], [8, 8]]
    assert selected["pixel_values"].shape == (1, 3, 4, (32 + 64) * 4)
    assert selected["pixel_values"][0, 0, 0, :128].eq(2).all() and selected["pixel_values"][0, 0, 0, 128:].eq(0).all()


def test_packed_views_of_videos_read_their_own_keys():
    views = PackedViews(tiny_minicpmv4_6_config())
    inputs = {key + "_videos": value for key, value in _packed([(4, 4), (4, 4)]).items()}
    assert views.item_token_counts(inputs, modality="video") == [1, 1]
    assert views.count_items(inputs, modality="video") == 2
    assert views.count_items(inputs) is None


def test_global_and_local_views_order_their_runs():
    config = tiny_step3p7_config()
    inputs = {
        "pixel_values": torch.zeros(2, 3, 16, 16),
        "pixel_values_local": torch.zeros(3, 3, 8, 8),
        "num_local_patches": torch.tensor([0, 3]),
    }
    assert GlobalAndLocalViews(config).item_token_counts(inputs) == [[4], [1, 1, 1, 4]]
    global_first = GlobalAndLocalViews(config, local_views_first=False)
    assert global_first.item_token_counts(inputs) == [[4], [4, 1, 1, 1]]
    one_run = GlobalAndLocalViews(config, views_in_one_run=True, separator_tokens=1)
    assert one_run.item_token_counts(inputs) == [5, 8]


def test_global_and_local_views_select_each_images_crops():
    views = GlobalAndLocalViews(tiny_step3p7_config())
    local = torch.arange(5.0)[:, None, None, None].expand(5, 3, 8, 8)
    inputs = {"pixel_values": torch.zeros(3, 3, 16, 16), "pixel_values_local": local}
    inputs["num_local_patches"] = torch.tensor([2, 0, 3])
    selected = views.select_item_inputs(inputs, [2, 0])
    assert selected["num_local_patches"].tolist() == [3, 2]
    assert selected["pixel_values_local"][:, 0, 0, 0].tolist() == [2.0, 3.0, 4.0, 0.0, 1.0]
    assert "pixel_values_local" not in views.select_item_inputs(inputs, [1]), "no crops: upstream takes `None`"


def test_global_and_local_views_refuse_counts_that_do_not_add_up():
    views = GlobalAndLocalViews(tiny_step3p7_config())
    inputs = {"pixel_values": torch.zeros(2, 3, 16, 16), "pixel_values_local": torch.zeros(3, 3, 8, 8)}
    for counts in ([1, 1], [3], None):
        with pytest.raises(ValueError, match="num_local_patches"):
            views.item_token_counts({**inputs, "num_local_patches": counts})
