"""DeepSeek-OCR-2: an image is its crops, its global view and a separator in one run of placeholders. Each view runs
through the tower once (counted with a forward hook on the tower), whatever the crops; the crops' pixels reach the
logits; a stored prefix holding the image is reused only for the same views."""

from __future__ import annotations

import torch

from conftest import model_pair
from support.references import next_logits, uncached_logits, with_encoder_cache
from vlmprep import PrefixCache
from vlmprep.testing import VisionRunCounter, random_pixels

IMAGE_TOKEN = 122
CROPS = 2
RUN = [IMAGE_TOKEN] * (144 * (CROPS + 1) + 1)  # two crops' queries, the global view's, the separator
PROMPT = torch.tensor([[1, 5, 6, *RUN, 7, 8]])


def _inputs(crop_seed: int = 1, prompt: torch.Tensor = PROMPT) -> dict:
    return {
        "input_ids": prompt,
        "pixel_values": random_pixels(1, seed=0),
        "pixel_values_local": random_pixels(CROPS, seed=crop_seed),
        "num_local_patches": torch.tensor([CROPS]),
    }


class ViewsEncoded:
    """Counts the views the vision tower runs on, with a forward hook (a call's batch is its views)."""

    def __init__(self, model):
        self.tower, self.views = model.model.vision_tower, []

    def __enter__(self):
        self.handle = self.tower.register_forward_hook(lambda _, args, out: self.views.append(int(args[0].shape[0])))
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def test_views_encoded_once_then_from_the_encoder_cache():
    upstream, ours = model_pair("deepseek_ocr2")
    with with_encoder_cache(ours):
        first, other_crops = _inputs(crop_seed=1), _inputs(crop_seed=5)
        expected = [uncached_logits(upstream, inputs) for inputs in (first, other_crops)]
        assert (expected[0] - expected[1]).abs().max() > 1e-3  # the crops reach upstream's logits
        views = []
        for inputs, reference in ((first, expected[0]), (other_crops, expected[1]), (first, expected[0])):
            with VisionRunCounter(ours) as runs, ViewsEncoded(ours) as tower:
                torch.testing.assert_close(next_logits(ours, inputs), reference, atol=1e-5, rtol=0)
            views.append((runs.calls, sum(tower.views)))
        # one encoder call per new image: its global view and its two crops; the first image again: none
        assert views == [(1, 1 + CROPS), (1, 1 + CROPS), (0, 0)]


def test_prefix_store_reuses_the_image_of_the_same_views_only():
    upstream, ours = model_pair("deepseek_ocr2")
    store = PrefixCache()
    next_logits(ours, _inputs(), prefix_cache=store)
    longer = torch.cat([PROMPT, torch.tensor([[9, 10]])], dim=1)
    follow_up = _inputs(prompt=longer)
    with ViewsEncoded(ours) as tower:
        logits = next_logits(ours, follow_up, prefix_cache=store)
    torch.testing.assert_close(logits, uncached_logits(upstream, follow_up), atol=1e-5, rtol=0)
    assert tower.views == [] and store.stats.hits == 1
    other = _inputs(crop_seed=5, prompt=longer)  # same ids, other crops: the stored prefix is not theirs
    logits = next_logits(ours, other, prefix_cache=store)
    torch.testing.assert_close(logits, uncached_logits(upstream, other), atol=1e-5, rtol=0)


def test_view_placeholders_follow_the_towers_query_count():
    _, ours = model_pair("deepseek_ocr2")
    assert ours.view_token_count(16, 16) == 144  # a 1x1 grid: the 144 queries of small views
    assert ours.view_token_count(208, 208) == 256  # 13x13 = 169 cells > 144: the 256 queries of large views
