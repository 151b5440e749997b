"""The prefix cache on hybrid decoders (Gated DeltaNet, short convolutions): snapshots of the recurrent states.

A hybrid decoder resumes only where every recurrent layer's state is stored (the end of a stored row, an item's end,
a prefill chunk's end). Every logit is compared with the plain transformers class without a cache; work is counted
where it happens (vision-encoder calls, tokens each language-model forward is fed).
"""

from __future__ import annotations

import pytest
import torch
import transformers

import vlmprep
from conftest import model_pair
from support.chat import run_chat, turn_image_seeds
from support.references import Prompt, assert_close, generate_logits, no_placeholder_answers, uncached_logits
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE, PrefillCounter, VisionRunCounter, tiny_config, tiny_model

SYSTEM = [2, *range(10, 21)]  # 12 tokens
USER_TURNS = [[SYSTEM, IMAGE, [30, 31]], [[32, 33, 34]], [[35], IMAGE, [36, 37]], [[38, 39]], [[40, 41, 42]]]
HYBRID_FAMILIES = [
    "qwen3_5",
    "qwen3_5_moe",
    "lfm2_vl",
    "lfm3_vl",
    "glm5_next",
    "inkling2",
    "qwen4_exp",
    "minicpmv4_6",
    "minicpmv4_7",
]


def _first_convolution_weight(model) -> torch.Tensor:
    # The running state's convolution: Gated DeltaNet's and GLM-5-Next's `conv1d`, LFM2's short convolution,
    # Inkling2's short convolutions of keys, values and residual streams
    layers = model.model.language_model.layers
    return next(module.weight for module in layers.modules() if isinstance(module, torch.nn.Conv1d))


@pytest.mark.parametrize("family", HYBRID_FAMILIES)
def test_the_recurrent_layers_reach_the_logits(family):
    # Tiny models must be able to fail: a resume with a wrong or missing state must move the logits
    upstream, ours = model_pair(family)
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[3])
    expected = uncached_logits(upstream, prompt.inputs())
    weight = _first_convolution_weight(upstream)
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.zero_()
    try:
        without_convolution = uncached_logits(upstream, prompt.inputs())
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    assert (expected - without_convolution).abs().max() > 1e-3


@pytest.mark.parametrize("family", HYBRID_FAMILIES)
def test_five_turn_chat_with_two_images_resumes_from_snapshots(family):
    upstream, ours = model_pair(family)
    ours.encoder_cache.clear()
    store = PrefixCache(max_bytes=2**26)
    new_tokens = 4
    seeds = turn_image_seeds(USER_TURNS)
    chat = run_chat(upstream, ours, USER_TURNS, seeds, store, new_tokens, **no_placeholder_answers(ours))
    encoded, fed, minimum, prompt = chat.encoded, chat.fed, chat.minimum, chat.last_prompt
    assert len(encoded) == 2 and sum(encoded) == ours.count_items(prompt.inputs()), "each image is encoded once"
    assert fed <= 1.02 * minimum, (fed, minimum)
    stats = store.stats
    assert stats.hits == len(USER_TURNS) - 1 and stats.snapshots > 0 and 0 < stats.snapshot_bytes < stats.bytes


@pytest.mark.parametrize("family", HYBRID_FAMILIES)
def test_two_conversations_share_a_system_prompt_with_an_image(family):
    upstream, ours = model_pair(family)
    store = PrefixCache(max_bytes=2**26)
    first = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31, 32]], image_seeds=[7])
    second = Prompt(ours.config, [SYSTEM, IMAGE, [40, 41]], image_seeds=[7])
    generate_logits(ours, first.inputs(), max_new_tokens=2, prefix_cache=store, **no_placeholder_answers(ours))
    with VisionRunCounter(ours) as runs, PrefillCounter(ours) as counter:
        _, logits = generate_logits(ours, second.inputs(), max_new_tokens=1, prefix_cache=store)
    assert_close(logits[0], uncached_logits(upstream, second.inputs()))
    assert runs.batch_sizes == [], "the shared image is inside the restored prefix"
    # Resumed right after the image: only the new user text (and what follows the image's end) is fed
    assert sum(counter.lengths) <= 2 + 2, counter.lengths


def test_attention_first_and_a_two_input_convolution_as_transformers_tester_builds_it():
    # transformers' own Qwen3.5 tester puts the attention layer first and uses a convolution of 2 inputs: snapshots
    # follow the cache's layer classes, whatever their order and window
    config = tiny_config("qwen3_5")
    config.text_config.layer_types = ["full_attention", "linear_attention"]
    config.text_config.linear_conv_kernel_dim = 2
    upstream = tiny_model(transformers.Qwen3_5ForConditionalGeneration, config, seed=1)
    ours = vlmprep.Qwen3_5ForConditionalGeneration(config).eval()
    ours.load_state_dict(upstream.state_dict())
    store = PrefixCache()
    segments = [SYSTEM, IMAGE, [30, 31]]
    for turn in range(3):
        prompt = Prompt(config, segments, image_seeds=[5])
        sequences, logits = generate_logits(
            ours, prompt.inputs(), max_new_tokens=3, prefix_cache=store, **no_placeholder_answers(ours)
        )
        assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))
        segments = [*segments, sequences[0, prompt.length :].tolist(), [40 + turn, 41]]
    assert store.stats.hits == 2


def test_qwen4_exps_ngram_embeddings_reach_the_logits_and_resume_exactly():
    # Its per-layer embeddings hash each token with the 2 before it: a resume point (or a chunk) that lost the token ids
    # before it would change them. The ids are a state of the cache layer, snapshotted like a convolution window.
    upstream, ours = model_pair("qwen4_exp")
    prompt = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31, 32, 33]], image_seeds=[3])
    expected = uncached_logits(upstream, prompt.inputs())
    embedding = next(layer.ple for layer in upstream.model.language_model.layers if layer.ple is not None)
    weight = embedding.ple_embedding.ngram_embedding.weight
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.copy_(weight.roll(1, dims=0))  # other n-grams' embeddings
    try:
        assert (expected - uncached_logits(upstream, prompt.inputs())).abs().max() > 1e-3
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    store = PrefixCache(max_bytes=2**26)
    shorter = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31]], image_seeds=[3])
    generate_logits(ours, shorter.inputs(), max_new_tokens=1, prefix_cache=store, **no_placeholder_answers(ours))
    with PrefillCounter(ours) as counter:
        _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefix_cache=store)
    assert_close(logits[0], expected)
    assert sum(counter.lengths) < prompt.length // 2, counter.lengths  # resumed: only the new tokens are fed
