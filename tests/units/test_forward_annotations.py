"""A drop-in whose `forward` wraps upstream's keeps upstream's signature and annotations: `generate` validates its kwargs
against the signature, and transformers' own model tests read the output type from `forward.__annotations__`
(`test_moe_models_record_router_logits`)."""

import inspect

import pytest

from vlmprep.models import DROP_IN_CLASSES


def upstream_class(drop_in: type) -> type:
    return next(base for base in drop_in.__mro__ if base.__module__.startswith("transformers.models."))


WRAPPING_FORWARD = sorted(
    {cls for cls in DROP_IN_CLASSES.values() if cls.forward is not upstream_class(cls).forward},
    key=lambda c: c.__name__,
)


def test_the_wrapping_families_are_found():
    # The families whose forward wraps upstream's (audio rows placed, Q-Former queries run): none may drop out of the
    # test below unnoticed.
    names = {cls.__name__ for cls in WRAPPING_FORWARD}
    assert {
        "Apertus1p5ForConditionalGeneration",
        "Blip2ForConditionalGeneration",
        "Dots3NoteForConditionalGeneration",
        "Gemma4ForConditionalGeneration",
        "InklingForConditionalGeneration",
        "InstructBlipForConditionalGeneration",
        "InstructBlipVideoForConditionalGeneration",
        "MuseSparkForConditionalGeneration",
        "NemotronH_Omni_Reasoning_V3",
        "Qwen2_5OmniThinkerForConditionalGeneration",
        "Qwen3OmniMoeThinkerForConditionalGeneration",
    } <= names


@pytest.mark.parametrize("drop_in", WRAPPING_FORWARD, ids=lambda c: c.__name__)
def test_forward_keeps_upstream_signature_and_annotations(drop_in):
    upstream = upstream_class(drop_in)
    assert inspect.signature(drop_in.forward) == inspect.signature(upstream.forward)
    assert drop_in.forward.__annotations__ == upstream.forward.__annotations__
    assert drop_in.forward.__annotations__["return"] is not None
