"""PEFT adapters: toggling a LoRA (disable_adapter, set_adapter, merge/unmerge, set_scale) changes `forward` without
changing a tensor; the encoder cache and the prefix store must follow it.

The reference is the plain transformers class with the same weights and the same LoRA (same adapter weights, toggled
alike): one uncached forward of the whole prompt. The adapters are drawn at random (`init_lora_weights=False`), so
each toggle changes the logits (checked, so the tests can fail).
"""

from __future__ import annotations

import contextlib

import peft
import pytest
import torch
from test_cache_identity import fresh_pair

from support.references import Prompt, assert_close, generate_logits, reference_next_logits
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE, VisionRunCounter

# peft 0.21 reads transformers' deprecated `is_gradient_checkpointing` when it wraps a model: peft's use, not ours.
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

SYSTEM = [2, *range(10, 21)]
# Where the LoRA goes: the vision tower's attention (features change: the encoder cache must follow), or the decoder's
# (KV changes: the prefix store must follow).
TARGETS = {"vision_tower": r".*vision_tower.*\.q_proj", "decoder": r".*language_model.*\.q_proj"}


def lora_pair(target: str) -> tuple:
    """(plain LLaVA, drop-in), each wrapped by `peft.get_peft_model` with the same two random LoRA adapters on `target`
    ("default" active, "other" loaded)."""
    upstream, ours = fresh_pair("llava")
    wrapped = []
    for model in (upstream, ours):
        torch.manual_seed(1)  # the same adapter weights in both
        config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS[target], init_lora_weights=False)
        peft_model = peft.get_peft_model(model, config)
        peft_model.add_adapter("other", config)
        wrapped.append(peft_model.eval())
    return tuple(wrapped)


@contextlib.contextmanager
def toggled(peft_model, toggle: str):
    """One adapter toggle, undone on exit."""
    if toggle == "disable_adapter":
        with peft_model.disable_adapter():
            yield
        return
    if toggle == "set_adapter":
        peft_model.set_adapter("other")
        yield
        peft_model.set_adapter("default")
    elif toggle == "merge_adapter":
        peft_model.merge_adapter()
        yield
        peft_model.unmerge_adapter()
    elif toggle == "set_scale":
        for module in peft_model.modules():
            if isinstance(module, peft.tuners.lora.LoraLayer):
                module.set_scale("default", 3.0)
        yield
        for module in peft_model.modules():
            if isinstance(module, peft.tuners.lora.LoraLayer):
                module.set_scale("default", 1.0)


def drop_in(peft_model):
    return peft_model.get_base_model()


@pytest.mark.parametrize("toggle", ["disable_adapter", "set_adapter", "merge_adapter", "set_scale"])
@pytest.mark.parametrize("target", list(TARGETS))
def test_adapter_toggles_are_seen_by_the_caches(target, toggle):
    upstream, ours = lora_pair(target)
    model = drop_in(ours)
    store = PrefixCache(block_size=4)
    prompt = Prompt(model.config, [SYSTEM, IMAGE, [30, 31, 32]], image_seeds=[1])

    def check() -> torch.Tensor:
        _, logits = generate_logits(model, prompt.inputs(), max_new_tokens=1, prefix_cache=store)
        expected = reference_next_logits(drop_in(upstream), prompt)
        assert_close(logits[0], expected)
        return expected

    with VisionRunCounter(model) as runs:
        adapter_on = check()
        check()  # served from the caches
        assert runs.calls == 1 and store.stats.tokens_reused > 0
        with toggled(ours, toggle), toggled(upstream, toggle):
            toggled_logits = check()
        # Every toggle changes the logits but a merge of the active adapter (the same function, other weights)
        assert torch.allclose(toggled_logits, adapter_on, atol=1e-4) == (toggle == "merge_adapter")
        check()  # back to the first state
    # A toggle of a vision-tower adapter changes the features: encoded again (a merge writes the weights, so its
    # unmerge gets a new identity too); a decoder adapter leaves the vision part alone
    if target == "decoder":
        assert runs.calls == 1
    else:
        assert runs.calls == (3 if toggle == "merge_adapter" else 2)


def test_per_row_adapters_are_never_served():
    # `adapter_names=` applies an adapter per row through forward hooks for one call: nothing of that call is served
    # to another (the next plain call matches the reference)
    upstream, ours = lora_pair("decoder")
    model = drop_in(ours)
    store = PrefixCache(block_size=4)
    prompt = Prompt(model.config, [SYSTEM, [30, 31, 32]])
    with torch.no_grad():
        for _ in range(2):
            ours.generate(**prompt.inputs(), max_new_tokens=1, adapter_names=["__base__"], prefix_cache=store)
    assert store.stats.lookups == 2 and store.stats.tokens_reused == 0
    _, logits = generate_logits(model, prompt.inputs(), max_new_tokens=1, prefix_cache=store)
    assert_close(logits[0], reference_next_logits(drop_in(upstream), prompt))
