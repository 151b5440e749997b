"""The prefix store and chunked prefill on Nemotron-H Omni's Mamba-2 decoder with a MoE layer: its mamba layers are
transformers' linear-attention cache layers (a convolution window and an SSM state), its MLP and MoE layers cache
nothing (`DummyLayer`). Text prompts, checked against the plain class without a cache (the family's conformance
scenarios and tests/units/test_nemotron_h_omni.py run its images and audio on the two-layer tiny decoder)."""

from __future__ import annotations

import pytest
import torch
import transformers

from support.references import assert_close, assert_same_steps
from vlmprep import NemotronH_Omni_Reasoning_V3, PrefixCache
from vlmprep.testing import PrefillCounter, tiny_model
from vlmprep.testing.configs import tiny_nemotron_h_omni_config


@pytest.fixture(scope="module")
def pair():
    config = tiny_nemotron_h_omni_config(layers_block_type=("linear_attention", "full_attention", "moe"))
    upstream = tiny_model(transformers.NemotronH_Omni_Reasoning_V3, config).eval()
    ours = NemotronH_Omni_Reasoning_V3(upstream.config).eval()
    ours.load_state_dict(upstream.state_dict())
    return upstream, ours


def _ids(length: int, seed: int) -> torch.Tensor:
    return torch.randint(3, 100, (1, length), generator=torch.Generator().manual_seed(seed))


def _generate(model, input_ids: torch.Tensor, **kwargs):
    out = model.generate(
        input_ids=input_ids,
        max_new_tokens=2,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
        suppress_tokens=[0, 1, 2],
        **kwargs,
    )
    return out.sequences, out.logits


def _uncached(upstream, input_ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return upstream(input_ids=input_ids, use_cache=False).logits[:, -1]


def test_the_mamba_layer_reaches_the_logits(pair):
    # A resume with a wrong or missing state must be able to move the logits
    upstream, _ = pair
    ids = _ids(20, 0)
    expected = _uncached(upstream, ids)
    weight = upstream.language_model.model.layers[0].mixer.conv1d.weight
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.zero_()
    try:
        without_convolution = _uncached(upstream, ids)
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    assert (expected - without_convolution).abs().max() > 1e-3


@pytest.mark.parametrize("chunk_size", [1, 3, 5, 8])
def test_chunked_prefill_carries_convolution_and_ssm_states_exactly(pair, chunk_size):
    upstream, ours = pair
    ids = _ids(23, 1)
    sequences, logits = _generate(ours, ids, prefill_chunk_size=chunk_size)
    expected_sequences, expected_logits = _generate(upstream, ids)
    assert torch.equal(sequences, expected_sequences)
    assert_same_steps(logits, expected_logits)


def test_a_chat_resumes_from_stored_mamba_states_exactly(pair):
    upstream, ours = pair
    store = PrefixCache(max_bytes=2**24)
    conversation = _ids(12, 2)
    for turn in range(4):
        conversation = torch.cat([conversation, _ids(3, 10 + turn)], dim=1)
        with PrefillCounter(ours) as counter:
            sequences, logits = _generate(ours, conversation, prefix_cache=store)
        assert_close(logits[0], _uncached(upstream, conversation))
        if turn > 0:  # the new user tokens and the previous answer's last token, whose state was never computed
            assert counter.lengths[0] == 4, counter.lengths
        conversation = sequences
    assert store.stats.hits == 3 and store.stats.snapshots > 0
