"""The prefix store and chunked prefill on a Mamba-2 decoder (Nemotron-H, as in Nemotron-H Omni): its mamba layers
are transformers' linear-attention cache layers (a convolution window and an SSM state), its MLP and MoE layers cache
nothing (`DummyLayer`). Text prompts only: `nemotron_h_omni` is not a drop-in yet (docs/families.md says why), so the
host here is a bare `VisionPrepMixin` over the plain class, checked against that class without a cache."""

from __future__ import annotations

import pytest
import torch
import transformers

from support.references import assert_close, assert_same_steps
from vlmprep import PrefixCache, VisionFacts, VisionPrepMixin
from vlmprep.testing import PrefillCounter, tiny_model


class _TextOnlyNemotronHOmni(VisionPrepMixin, transformers.NemotronH_Omni_Reasoning_V3):
    vision_facts = VisionFacts(per_image_keys=("image_grid_hw",), pixel_layout=None)

    @property
    def model(self):
        # The mixin finds the encoders on `model`; this class keeps them on itself
        return self


def _tiny_config() -> transformers.NemotronH_Omni_Reasoning_V3_Config:
    # A mamba layer (4 heads of 8, state 8, convolution of 4, scanned in chunks of 4), an attention layer, a MoE layer
    text = {
        "vocab_size": 128,
        "hidden_size": 32,
        "layers_block_type": ["linear_attention", "full_attention", "moe"],
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "intermediate_size": 32,
        "moe_intermediate_size": 16,
        "moe_shared_expert_intermediate_size": 16,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "ssm_state_size": 8,
        "mamba_num_heads": 4,
        "mamba_n_groups": 2,
        "mamba_head_dim": 8,
        "mamba_d_conv": 4,
        "mamba_expand": 1,
        "mamba_chunk_size": 4,
        "num_nextn_predict_layers": 0,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    vision = {
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "mlp_ratio": 2.0,
        "patch_size": 4,
        "image_size": 16,
        "max_img_size": 32,
        "num_cls_tokens": 2,
        "num_registers": 1,
        "video_temporal_patch_size": 2,
    }
    return transformers.NemotronH_Omni_Reasoning_V3_Config(
        text_config=text,
        vision_config=vision,
        audio_config=None,
        projector_hidden_size=32,
        vision_hidden_size=32,
        image_token_id=122,
        video_token_id=123,
        audio_token_id=124,
    )


@pytest.fixture(scope="module")
def pair():
    upstream = tiny_model(transformers.NemotronH_Omni_Reasoning_V3, _tiny_config()).eval()
    ours = _TextOnlyNemotronHOmni(upstream.config).eval()
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
