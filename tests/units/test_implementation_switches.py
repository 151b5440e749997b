"""Switching the attention or experts implementation works on a drop-in wherever it works on the transformers class.

transformers decides whether a class may switch by reading the source of the class's module; a drop-in's module is
vlmprep's (found by transformers' own Ernie 4.5-VL-MoE model tests: `set_experts_implementation` refused).
"""

from __future__ import annotations

import pytest
import torch
import transformers

from vlmprep.models.registry import load_drop_in_classes
from vlmprep.testing import tiny_config, tiny_model

DROP_INS = load_drop_in_classes()


@pytest.mark.parametrize("model_type", sorted(DROP_INS))
def test_a_drop_in_may_switch_what_its_transformers_class_may(model_type):
    drop_in = DROP_INS[model_type]
    upstream = getattr(transformers, drop_in.__name__)
    assert drop_in._can_set_attn_implementation() == upstream._can_set_attn_implementation()
    assert drop_in._can_set_experts_implementation() == upstream._can_set_experts_implementation()


def test_ernie_experts_implementation_switches_as_upstream():
    config = tiny_config("ernie4_5_vl_moe")
    drop_in_class = DROP_INS["ernie4_5_vl_moe"]
    upstream_class = getattr(transformers, drop_in_class.__name__)
    upstream, ours = tiny_model(upstream_class, config), tiny_model(drop_in_class, config)
    ids = torch.randint(3, config.text_config.vocab_size, (1, 6))
    for model in (upstream, ours):
        model.set_experts_implementation("batched_mm")
        assert model.config.text_config._experts_implementation == "batched_mm"
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids=ids).logits, upstream(input_ids=ids).logits, rtol=1e-5, atol=1e-5)
