"""What a cache layer holds per token beyond K/V: found from the layer itself, stored per token, or refused clearly."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import Cache, DynamicIndexedLayer, DynamicLayer
from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import MiniMaxM3VLSparseCacheLayer

from vlmprep.cache.layer_extras import (
    ExtraTensor,
    UnsupportedCacheLayer,
    describe_layer_extras,
    extended_layer_classes,
    extra_states,
    restore_layer_extras,
)

TOKENS = 5


def _filled(layer, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    keys = torch.randn(1, 2, TOKENS, 4, generator=generator)
    layer.update(keys, keys + 1)
    return layer


def _round_trip(layer_class, fill) -> tuple[Cache, Cache]:
    source = Cache(layers=[DynamicLayer(), _filled(layer_class())])
    fill(source.layers[1])
    extras = describe_layer_extras(source, TOKENS)
    states = extra_states(source, extras)
    target = Cache(layers=[DynamicLayer(), _filled(layer_class())])
    restore_layer_extras(target, extras, [keys[:1] for keys, _ in states], torch.device("cpu"))
    return source, target, extras


def test_an_indexers_keys_are_found_and_restored_to_the_token():
    def fill(layer):
        layer.update_indexer(torch.randn(1, TOKENS, 7))
        layer.indexer_position_ids = torch.arange(TOKENS).expand(3, 1, TOKENS)  # (position dims, batch, tokens)

    source, target, extras = _round_trip(DynamicIndexedLayer, fill)
    assert set(extras.tensors) == {
        ExtraTensor(1, "indexer_keys", batch_axis=0, token_axis=1),
        ExtraTensor(1, "indexer_position_ids", batch_axis=1, token_axis=2),
    }
    restored = target.layers[1]
    assert torch.equal(restored.indexer_keys, source.layers[1].indexer_keys)
    assert torch.equal(restored.indexer_position_ids, source.layers[1].indexer_position_ids)
    # The flags its lazy initialization set: the next forward concatenates to the restored keys
    assert restored.is_indexer_initialized
    assert restored.update_indexer(torch.zeros(1, 1, 7)).shape == (1, TOKENS + 1, 7)


def test_minimax_m3s_sparse_layer_is_held_not_dropped():
    # A plain DynamicLayer subclass with per-token keys of its own (`idx_keys`, tokens on axis -2)
    source, target, extras = _round_trip(
        MiniMaxM3VLSparseCacheLayer, lambda layer: layer.update_index(torch.randn(1, 1, TOKENS, 6))
    )
    assert extras.tensors == (ExtraTensor(1, "idx_keys", batch_axis=0, token_axis=2),)
    assert torch.equal(target.layers[1].idx_keys, source.layers[1].idx_keys)
    assert extended_layer_classes(Cache(layers=[DynamicLayer(), MiniMaxM3VLSparseCacheLayer()])) == [
        "MiniMaxM3VLSparseCacheLayer"
    ]


class _LayerWithAFixedSizeState(DynamicLayer):
    # An unknown layer class whose extra tensor does not grow with the tokens: it cannot be cut per token
    def __init__(self):
        super().__init__()
        self.summary = torch.zeros(1, 3)


class _LayerWithACount(MiniMaxM3VLSparseCacheLayer):
    # Per-token keys it crops as it should, and a count: restoring a count of another length would be silently wrong
    _layer_type = None  # inherited, it would register this class for MiniMax M3's sparse layers in every cache

    def __init__(self):
        super().__init__()
        self.idx_keys = torch.zeros(1, 1, TOKENS, 2)
        self.seen_tokens = TOKENS


@pytest.mark.parametrize(
    ("layer_class", "named"), [(_LayerWithAFixedSizeState, "`summary`"), (_LayerWithACount, "`seen_tokens`")]
)
def test_an_unknown_layer_with_extra_tensors_is_refused_naming_what_it_holds(layer_class, named):
    cache = Cache(layers=[_filled(layer_class())])
    with pytest.raises(UnsupportedCacheLayer, match=f"{layer_class.__name__}.*{named}"):
        describe_layer_extras(cache, TOKENS)


def test_plain_kv_layers_hold_no_extras():
    cache = Cache(layers=[_filled(DynamicLayer())])
    assert not describe_layer_extras(cache, TOKENS)
    assert extended_layer_classes(cache) == []
