"""Cache identity: entries made under other weights, autocast, mode, model copy or salt are never served.

Every exactness check compares against the plain transformers class holding the same weights (one uncached forward of
the whole prompt). Tests that change weights build models of their own, never the session-shared pairs.
"""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
import torch.utils.benchmark

import vlmprep
from support.references import Prompt, assert_close, generate_logits, reference_next_logits
from support.registry import FAMILY_CASES
from support.traits import families_with, has_multimodal_rope, not_, sampled
from vlmprep import EncoderCache, PrefixCache
from vlmprep.cache.identity import (
    WeightsEpochs,
    cache_identity,
    check_cache_salt,
    part_modules,
    salt_namespace,
    weights_fingerprint,
)
from vlmprep.testing import IMAGE, VisionRunCounter

FAMILIES = families_with(sampled("mainstream"), not_(has_multimodal_rope))
SYSTEM = [2, *range(10, 21)]  # 12 tokens: three prefix-cache blocks of 4 before the image


def fresh_pair(family: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(transformers model, drop-in) with the same random weights, owned by the calling test.

    Gemma3's upstream init zeroes `mm_input_projection_weight`, so image features would never reach the logits and
    a stale feature could not fail a test: it is re-initialized.
    """
    torch.manual_seed(0)
    case = FAMILY_CASES[family]
    config = case.make_config()
    upstream = case.upstream_class(config).eval()
    if family == "gemma3":
        with torch.no_grad():
            upstream.model.multi_modal_projector.mm_input_projection_weight.normal_(std=0.02)
    ours = vlmprep.AutoModelForImageTextToText.from_config(config).eval()
    ours.load_state_dict(upstream.state_dict())
    return upstream, ours


def _prompt(ours) -> Prompt:
    return Prompt(ours.config, [SYSTEM, IMAGE, [30, 31, 32]], image_seeds=[1])


def _assert_exact(upstream, ours, prompt: Prompt, **kwargs) -> None:
    """`ours.generate` gives the logits of one uncached upstream forward, with upstream holding ours' weights."""
    upstream.load_state_dict(ours.state_dict())
    _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, **kwargs)
    assert_close(logits[0], reference_next_logits(upstream, prompt))


def _perturbed_state(model) -> dict:
    generator = torch.Generator().manual_seed(1)
    return {
        key: value + 0.05 * torch.randn(value.shape, generator=generator) if value.is_floating_point() else value
        for key, value in model.state_dict().items()
    }


def _optimizer_step(model, optimizer) -> None:
    prompt = _prompt(model)
    model.train()
    model(**prompt.inputs()).logits.square().mean().backward()
    optimizer.step()
    model.zero_grad()
    model.eval()


def _merge_low_rank_adapter(model) -> None:
    # As an adapter merge does: `weight.data += B @ A`, through `.data` (the version counter does not move).
    generator = torch.Generator().manual_seed(2)
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            out_features, in_features = module.weight.shape
            lora_b = torch.randn(out_features, 2, generator=generator)
            lora_a = torch.randn(2, in_features, generator=generator)
            module.weight.data += 0.05 * lora_b @ lora_a


WEIGHT_CHANGES = {
    "load_state_dict": lambda model: model.load_state_dict(_perturbed_state(model)),
    "half_then_float": lambda model: model.half().float(),
    "sgd_step": lambda model: _optimizer_step(model, torch.optim.SGD(model.parameters(), lr=0.5)),
    "fused_adamw_step": lambda model: _optimizer_step(
        model, torch.optim.AdamW(model.parameters(), lr=0.01, fused=True)
    ),
    "data_mul_": lambda model: [param.data.mul_(1.1) for param in model.parameters()],
    "adapter_merge": _merge_low_rank_adapter,
}


# -- weights ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("change", sorted(WEIGHT_CHANGES))
@pytest.mark.parametrize("family", FAMILIES)
def test_encoder_cache_follows_weight_changes(family, change):
    upstream, ours = fresh_pair(family)
    prompt = _prompt(ours)
    _assert_exact(upstream, ours, prompt)  # fills the encoder cache
    WEIGHT_CHANGES[change](ours)
    _assert_exact(upstream, ours, prompt)


@pytest.mark.parametrize("change", sorted(WEIGHT_CHANGES))
@pytest.mark.parametrize("family", FAMILIES)
def test_prefix_cache_follows_weight_changes(family, change):
    upstream, ours = fresh_pair(family)
    ours.encoder_cache = None  # only the prefix store could serve stale work
    store = PrefixCache(block_size=4)
    prompt = _prompt(ours)
    _assert_exact(upstream, ours, prompt, prefix_cache=store)
    _assert_exact(upstream, ours, prompt, prefix_cache=store)
    assert store.stats.tokens_reused > 0  # the store does serve this prompt while the weights stay
    WEIGHT_CHANGES[change](ours)
    _assert_exact(upstream, ours, prompt, prefix_cache=store)


def test_decoder_change_keeps_encoder_entries():
    # Features depend on the vision part only: a language-model change must not cost a vision run.
    upstream, ours = fresh_pair("llava")
    prompt = _prompt(ours)
    vision_before, model_before = cache_identity(ours, "vision"), cache_identity(ours, "model")
    _assert_exact(upstream, ours, prompt)
    hits = ours.encoder_cache.stats.hits
    with torch.no_grad():
        ours.get_decoder().layers[0].mlp.up_proj.weight.mul_(1.1)
    assert cache_identity(ours, "vision") == vision_before
    assert cache_identity(ours, "model") != model_before
    _assert_exact(upstream, ours, prompt)
    assert ours.encoder_cache.stats.hits == hits + 1


def test_part_modules_leave_out_the_language_model_only():
    _, ours = fresh_pair("gemma3")
    root, skipped = part_modules(ours, "vision")
    assert root is ours and ours.get_decoder() in skipped
    assert part_modules(ours, "model") == (ours, ())
    with pytest.raises(ValueError, match="part"):
        part_modules(ours, "text")


@pytest.mark.parametrize(
    "change",
    [
        lambda layer: layer.load_state_dict({k: v + 1 for k, v in layer.state_dict().items()}),
        lambda layer: layer.weight.data.mul_(2),
        lambda layer: setattr(layer.weight, "data", layer.weight.data.clone()),  # same values, new tensor
        lambda layer: setattr(layer.weight, "data", layer.weight.data.t()),  # same storage, other layout
        lambda layer: layer.double(),
        lambda layer: layer.register_buffer("scale", torch.ones(1)),
    ],
    ids=["load_state_dict", "data_mul_", "data_replaced", "transposed", "double", "new_buffer"],
)
def test_weights_fingerprint_sees_changes(change):
    layer = torch.nn.Linear(4, 4)
    before = weights_fingerprint(layer)
    assert weights_fingerprint(layer) == before
    change(layer)
    assert weights_fingerprint(layer) != before


def test_weights_epochs_never_reuse_a_token():
    epochs = WeightsEpochs()
    first = epochs.token("model", ("a",))
    assert epochs.token("model", ("a",)) == first
    second = epochs.token("model", ("b",))
    # Back to the first fingerprint (e.g. memory reallocated at the same address): still a new token.
    assert epochs.token("model", ("a",)) not in (first, second)
    assert epochs.token("vision", ("a",)) != first


def test_identity_cost_is_small_next_to_a_vision_run():
    _, ours = fresh_pair("gemma3")
    pixels = _prompt(ours).pixel_values
    timer = torch.utils.benchmark.Timer
    identity = timer("cache_identity(ours, 'model')", globals={"cache_identity": cache_identity, "ours": ours})
    with torch.no_grad():
        vision = timer("ours.model.get_image_features(pixels)", globals={"ours": ours, "pixels": pixels})
        # Generous: the tiny tower is ~30x cheaper than a real one relative to its tensor count.
        assert identity.blocked_autorange().median < 2 * vision.blocked_autorange().median


# -- autocast and mode ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_prefix_cache", [False, True], ids=["encoder_cache", "prefix_cache"])
@pytest.mark.parametrize("family", FAMILIES)
def test_autocast_entries_are_not_served_without_autocast(family, use_prefix_cache):
    upstream, ours = fresh_pair(family)
    kwargs = {"prefix_cache": PrefixCache(block_size=4)} if use_prefix_cache else {}
    if use_prefix_cache:
        ours.encoder_cache = None
    prompt = _prompt(ours)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        generate_logits(ours, prompt.inputs(), max_new_tokens=1, **kwargs)
    _assert_exact(upstream, ours, prompt, **kwargs)


def test_identity_carries_autocast_and_mode():
    _, ours = fresh_pair("llava")
    eval_identity = cache_identity(ours, "model")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = cache_identity(ours, "model")
    with torch.autocast("cpu", dtype=torch.float16):
        fp16 = cache_identity(ours, "model")
    assert len({eval_identity, bf16, fp16}) == 3
    ours.model.vision_tower.train()  # one submodule in training mode is enough for dropout to differ
    assert cache_identity(ours, "vision")[2] == "train"
    ours.eval()
    assert cache_identity(ours, "model") == eval_identity


def test_prefix_entries_made_in_train_mode_are_not_served_in_eval_mode():
    upstream, ours = fresh_pair("llava")
    store = PrefixCache(block_size=4)
    prompt = _prompt(ours)
    ours.train()
    generate_logits(ours, prompt.inputs(), max_new_tokens=1, prefix_cache=store)
    ours.eval()
    reused = store.stats.tokens_reused
    _assert_exact(upstream, ours, prompt, prefix_cache=store)
    assert store.stats.tokens_reused == reused


# -- copies -----------------------------------------------------------------------------------------------------------


def _torch_save_load(model):
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def _assert_copy_is_cold_and_exact(upstream, ours, clone, prompt: Prompt, shared_store: PrefixCache) -> None:
    # Empty caches with the same settings, and an identity of its own: nothing is shared with the original.
    assert len(clone.encoder_cache) == 0 and clone.encoder_cache.max_bytes == ours.encoder_cache.max_bytes
    assert len(clone.prefix_cache) == 0
    assert (clone.prefix_cache.block_size, clone.prefix_cache.max_bytes) == (4, 2**24)
    assert cache_identity(clone, "vision") != cache_identity(ours, "vision")
    reused = shared_store.stats.tokens_reused
    _assert_exact(upstream, clone, prompt, prefix_cache=shared_store)
    assert shared_store.stats.tokens_reused == reused
    _assert_exact(upstream, clone, prompt)
    _assert_exact(upstream, ours, prompt)  # the original still works, with its own entries


@pytest.mark.parametrize("family", FAMILIES)
def test_deepcopy_after_generate(family):
    upstream, ours = fresh_pair(family)
    ours.prefix_cache = PrefixCache(block_size=4, max_bytes=2**24)
    shared_store = PrefixCache(block_size=4)
    prompt = _prompt(ours)
    _assert_exact(upstream, ours, prompt)
    _assert_exact(upstream, ours, prompt, prefix_cache=shared_store)
    assert len(ours.encoder_cache) > 0 and len(ours.prefix_cache) > 0
    _assert_copy_is_cold_and_exact(upstream, ours, copy.deepcopy(ours), prompt, shared_store)


@pytest.mark.parametrize("family", FAMILIES)
def test_torch_save_with_filled_caches(family):
    upstream, ours = fresh_pair(family)
    ours.prefix_cache = PrefixCache(block_size=4, max_bytes=2**24)
    ours.encoder_cache.put(("an", "entry"), torch.ones(4))
    shared_store = PrefixCache(block_size=4)
    prompt = _prompt(ours)
    generate_logits(copy.deepcopy(ours), prompt.inputs(), max_new_tokens=1, prefix_cache=shared_store)
    _assert_copy_is_cold_and_exact(upstream, ours, _torch_save_load(ours), prompt, shared_store)


def test_torch_save_after_generate_fails_only_as_upstream_does():
    # transformers 5.24 itself cannot pickle a model after one forward: its output-capturing hooks are local
    # functions. The caches must add no failure of their own.
    upstream, ours = fresh_pair("llava")
    prompt = _prompt(ours)
    with torch.no_grad():
        upstream(**prompt.inputs())
    upstream_error = None
    try:
        torch.save(upstream, io.BytesIO())
    except Exception as error:  # noqa: BLE001 - the error, whatever it is, is what ours must match
        upstream_error = error
    _assert_exact(upstream, ours, prompt, prefix_cache=PrefixCache(block_size=4))
    ours.prefix_cache = PrefixCache()
    if upstream_error is None:
        _assert_exact(upstream, _torch_save_load(ours), prompt)
    else:
        with pytest.raises(type(upstream_error)) as raised:
            torch.save(ours, io.BytesIO())
        assert str(raised.value) == str(upstream_error) and "lock" not in str(raised.value)


@pytest.mark.parametrize("cache_class", [EncoderCache, PrefixCache])
@pytest.mark.parametrize("make_copy", [copy.copy, copy.deepcopy, lambda c: pickle.loads(pickle.dumps(c))])
def test_cache_copies_are_empty_with_the_same_settings(cache_class, make_copy):
    cache = cache_class(max_bytes=12345)
    if cache_class is EncoderCache:
        cache.put("key", torch.ones(4))
    clone = make_copy(cache)
    assert type(clone) is cache_class and len(clone) == 0 and clone.max_bytes == 12345
    assert clone._lock is not cache._lock
    if cache_class is EncoderCache:
        assert clone.stats.hits == 0 and clone.put("key", torch.ones(4)) and len(cache) == 1


def test_weights_epochs_copy_empty():
    epochs = WeightsEpochs()
    token = epochs.token("model", ("a",))
    assert copy.deepcopy(epochs).token("model", ("a",)) != token
    assert pickle.loads(pickle.dumps(epochs)).token("model", ("a",)) != token


# -- salt -------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("salt", [123, b"tenant", ("a",), 1.5])
def test_non_str_salt_is_a_clear_type_error(salt):
    _, ours = fresh_pair("llava")
    with pytest.raises(TypeError, match="`cache_salt` must be a str"):
        generate_logits(ours, _prompt(ours).inputs(), max_new_tokens=1, cache_salt=salt)
    with pytest.raises(TypeError, match="cache_salt"):
        check_cache_salt(salt)


def test_salt_none_differs_from_every_string():
    assert len({salt_namespace(None), salt_namespace("None"), salt_namespace(""), salt_namespace("-")}) == 4


@pytest.mark.parametrize("family", FAMILIES)
def test_salt_none_and_string_none_share_no_entries(family):
    upstream, ours = fresh_pair(family)
    store = PrefixCache(block_size=4)
    prompt = _prompt(ours)
    _assert_exact(upstream, ours, prompt, prefix_cache=store)
    reused, misses = store.stats.tokens_reused, ours.encoder_cache.stats.misses
    _assert_exact(upstream, ours, prompt, prefix_cache=store, cache_salt="None")
    assert store.stats.tokens_reused == reused
    _assert_exact(upstream, ours, prompt, prefix_cache=store, cache_salt="None")  # the same salt is shared
    assert store.stats.tokens_reused > reused
    assert ours.encoder_cache.stats.misses == misses + 1


@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int8, torch.bool]
)
def test_kept_sampling_views_see_in_place_writes_of_every_element_size(dtype):
    # The views are made once and read again (numpy views of the tensors' memory on the CPU): a write through `.data`,
    # which the version counter does not see, must still change the identity on the next call.
    model = torch.nn.Module()
    model.register_buffer("values", torch.zeros(64, dtype=dtype))
    first = cache_identity(model, part="model")
    assert cache_identity(model, part="model") == first
    model.values.data.fill_(1)
    second = cache_identity(model, part="model")
    assert second != first
    assert cache_identity(model, part="model") == second


# -- inference tensors -------------------------------------------------------------------------------------------------


def inference_tensor_pair(family: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """`fresh_pair` built under `torch.inference_mode()` (a common serving pattern): every weight an inference tensor,
    which has no version counter."""
    with torch.inference_mode():
        upstream, ours = fresh_pair(family)
    assert all(parameter.is_inference() for parameter in ours.parameters())
    return upstream, ours


@pytest.mark.parametrize("use_prefix_cache", [False, True], ids=["encoder_cache", "prefix_cache"])
def test_inference_tensors_run_and_follow_weight_changes(use_prefix_cache):
    upstream, ours = inference_tensor_pair("llava")
    store = PrefixCache(block_size=4)
    kwargs = {"prefix_cache": store} if use_prefix_cache else {}
    prompt = _prompt(ours)
    with VisionRunCounter(ours) as runs:
        for _ in range(2):  # the same weights: the second call is served from the caches
            _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, **kwargs)
            assert_close(logits[0], reference_next_logits(upstream, prompt))
        assert runs.calls == 1
        assert not use_prefix_cache or store.stats.tokens_reused > 0
        # An inference tensor can be written in place only under inference mode; a load writes every element
        changed = _perturbed_state(ours)
        with torch.inference_mode():
            ours.load_state_dict(changed)
            upstream.load_state_dict(changed)
        reused = store.stats.tokens_reused
        _, logits = generate_logits(ours, prompt.inputs(), max_new_tokens=1, **kwargs)
    assert runs.calls == 2 and store.stats.tokens_reused == reused
    assert_close(logits[0], reference_next_logits(upstream, prompt))
    other = Prompt(ours.config, [SYSTEM, IMAGE, [30, 31, 32]], image_seeds=[2])  # the images change the logits
    assert not torch.allclose(reference_next_logits(upstream, other), logits[0], atol=1e-3)
